// Renders tests/chat/conversations.jsonl with the chat templates of templates.json
// through @huggingface/jinja (a JavaScript Jinja engine), as the reference for
// tiergen's native renderings. Usage: node render_reference.mjs PACKAGE_DIR OUT.jsonl
// Writes one line per (template, conversation): {"template", "conversation", "text"}.
import fs from "node:fs";
import path from "node:path";
import url from "node:url";

const [packageDir, outPath] = process.argv.slice(2);
const here = path.dirname(url.fileURLToPath(import.meta.url));
const { Template } = await import(url.pathToFileURL(path.join(packageDir, "dist", "index.js")).href);
const templates = JSON.parse(fs.readFileSync(path.join(here, "templates.json"), "utf8"));
const conversations = fs.readFileSync(path.join(here, "conversations.jsonl"), "utf8").split("\n").filter((l) => l.trim());
const out = [];
for (const [name, t] of Object.entries(templates)) {
  const template = new Template(t.chat_template);
  conversations.forEach((line, i) => {
    const text = template.render({
      messages: JSON.parse(line),
      bos_token: t.bos_token,
      eos_token: t.eos_token,
      add_generation_prompt: true,
    });
    out.push(JSON.stringify({ template: name, conversation: i, text }));
  });
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
