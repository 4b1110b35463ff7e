// Writes the benchmark text for bench/tokenizer_bench.sh to stdout: about
// <megabytes> MB of deterministic pseudo-text with a large vocabulary (words built
// from syllables, so most words are rare, as in real corpora), numbers, code-like
// lines, punctuation, accents, CJK and emoji.
//
//   node bench/make_tokenizer_text.mjs [megabytes=10] > text.txt
const target = Number(process.argv[2] ?? 10) * 1e6;
let seed = 2026;
function rand() {
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (a) => a[Math.floor(rand() * a.length)];
const common = ("the of and to a in is it that was for on are with as his they be at one have this from or had by " +
  "not word but what some we can out other were all there when up use your how said an each she which do their time " +
  "if will way about many then them write would like so these her long make thing see him two has look more day " +
  "could go come did number sound no most people my over know water than call first who may down side been now find").split(" ");
const syllables = ["ka", "lo", "mi", "ter", "an", "dis", "pro", "con", "tion", "ment", "ly", "er", "ing", "ed", "re",
  "un", "in", "ex", "st", "ch", "th", "ou", "ea", "qu", "ble", "ous", "ive", "al", "ic", "ism"];
const extras = ["café", "naïve", "Zürich", "façade", "中文", "日本語", "😀", "👍🏽", "résumé", "Straße", "Москва"];
const punct = [",", ".", ";", ":", "!", "?", " -", " (", ")", "\"", "'s", "'ll", "n't"];

function word() {
  const r = rand();
  if (r < 0.55) return pick(common);
  if (r < 0.9) {
    let w = "";
    for (let i = 0, n = 1 + Math.floor(rand() * 4); i < n; ++i) w += pick(syllables);
    return rand() < 0.1 ? w[0].toUpperCase() + w.slice(1) : w;
  }
  if (r < 0.96) return String(Math.floor(rand() * 10 ** (1 + Math.floor(rand() * 6))));
  return pick(extras);
}

function line() {
  if (rand() < 0.08) {
    const indent = " ".repeat(4 * Math.floor(rand() * 3));
    return `${indent}${word()}_${word()} = ${word()}(${word()}, ${Math.floor(rand() * 100)})  # ${word()}`;
  }
  const parts = [];
  for (let i = 0, n = 20 + Math.floor(rand() * 120); i < n; ++i) {
    parts.push(word() + (rand() < 0.12 ? pick(punct) : ""));
  }
  return parts.join(" ");
}

let size = 0;
const out = [];
while (size < target) {
  const l = line();
  out.push(l);
  size += Buffer.byteLength(l) + 1;
}
process.stdout.write(out.join("\n") + "\n");
