// Renders tests/chat/conversations.jsonl with the chat templates of templates.json
// through @huggingface/jinja (a JavaScript Jinja engine), as the reference for
// tiergen's renderings. Usage: node render_reference.mjs PACKAGE_DIR OUT.jsonl
// Writes one line per (template, conversation): {"template", "conversation", "text"}, or
// {"template", "conversation", "error"} with the message when the template throws (e.g.
// raise_exception on roles it refuses); the other renderings go on. A template the
// engine cannot parse gets an "error" line for each conversation.
import fs from "node:fs";
import path from "node:path";
import url from "node:url";

const [packageDir, outPath] = process.argv.slice(2);
const here = path.dirname(url.fileURLToPath(import.meta.url));
const { Template } = await import(url.pathToFileURL(path.join(packageDir, "dist", "index.js")).href);
const templates = JSON.parse(fs.readFileSync(path.join(here, "templates.json"), "utf8"));
const conversations = fs.readFileSync(path.join(here, "conversations.jsonl"), "utf8").split("\n").filter((l) => l.trim());
const out = [];
const message = (e) => (e instanceof Error ? e.message : String(e));
for (const [name, t] of Object.entries(templates)) {
  let template = null;
  let parseError = null;
  try {
    template = new Template(t.chat_template);
  } catch (e) {
    parseError = message(e);
  }
  conversations.forEach((line, i) => {
    if (parseError !== null) {
      out.push(JSON.stringify({ template: name, conversation: i, error: parseError }));
      return;
    }
    try {
      const text = template.render({
        messages: JSON.parse(line),
        bos_token: t.bos_token,
        eos_token: t.eos_token,
        add_generation_prompt: true,
      });
      out.push(JSON.stringify({ template: name, conversation: i, text }));
    } catch (e) {
      out.push(JSON.stringify({ template: name, conversation: i, error: message(e) }));
    }
  });
}
fs.writeFileSync(outPath, out.join("\n") + "\n");
