// Writes corpus.jsonl: the strings on which the tokenizer tests compare our token
// ids with the JavaScript reference implementations (one JSON string per line).
// Deterministic: rerunning it rewrites the same file.
//
//   node tests/tokenizer/make_corpus.mjs > tests/tokenizer/corpus.jsonl
//
// Left out on purpose, because the references disagree with the Hugging Face
// tokenizers (whose behaviour tiergen follows) on them: U+0085 and U+FEFF (JavaScript's
// \s differs from Unicode White_Space there), U+180E, and the long s or Kelvin sign
// after an apostrophe (case-insensitive contraction matching).
// "<|endoftext|>" appears only where the GPT-2 test treats it as plain text.

let seed = 12345;
function rand() {  // xorshift32
  seed ^= seed << 13; seed >>>= 0;
  seed ^= seed >>> 17;
  seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const pick = (list) => list[Math.floor(rand() * list.length)];

const prose = [
  "The quick brown fox jumps over the lazy dog.",
  "Hello, world!",
  "It's a truth universally acknowledged, that a single man in possession of a good fortune, must be in want of a wife.",
  "I'm sure they'll say we'd've done it if you're right; it isn't what I've heard.",
  "IT'S SHOUTING: WE'LL, THEY'RE, YOU'VE, I'M, HE'D, SHE'S.",
  "Don't stop believin'.",
  "rock 'n' roll ''quoted'' 'single' \"double\"",
  "Mr. Smith went to Washington D.C. on Jan. 5th, 2024 at 3:45 p.m.",
  "e.g. i.e. etc. vs. a.k.a.",
  "To be, or not to be, that is the question:",
  "Offline batch generation streams weights through GPU, CPU and disk.",
  "  leading spaces",
  "trailing spaces   ",
  "   ",
  " ",
  "a",
  "",
  "x y  z   w    v     u",
  "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS #$%",
  "camelCaseIdentifier snake_case_identifier kebab-case-identifier SCREAMING_CASE",
  "Hyphen-ated and em—dash and en–dash … ellipsis",
  "“Curly quotes” and ‘single curly’ and «guillemets»",
];

const code = [
  "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
  "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}",
  "#include <vector>\nint main() { std::vector<int> v{1, 2, 3}; return v.size(); }",
  "const x = {a: 1, 'b': [2, 3], \"c\": null}; // comment",
  "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son';",
  "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
  "$ ls -la /usr/local/bin | grep -E '^-rwx' > out.txt 2>&1",
  "if x:\n\tif y:\n\t\tpass\n\telse:\n\t\treturn None\n",
  "fn main() -> Result<(), Box<dyn Error>> { println!(\"{:?}\", vec![1u8; 4]); Ok(()) }",
  "lambda x: x**2 + 3*x - 1  # quadratic",
  "https://example.com/path/to/page?query=a+b&x=1#anchor",
  "user.name+tag@example.co.uk",
  "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, true, false, null]}",
  "0x1F600 0b1010 0o755 1e-9 3.14159 -42 +7",
  "    indented four\n        indented eight\n",
  "\t\tdouble tab\t\ttab inside\t",
  "a\r\nb\r\n\r\nc",
  "line1\nline2\n\nline4\n\n\n",
  "\n\n\n",
  "\t",
  "x\u000by\u000cz",
  "!!!???...,,,;;;:::",
  "@@@ ### $$$ %%% ^^^ &&& *** ((( ))) ___ +++ === ~~~ ```",
];

const numbers = [
  "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890",
  "3.14159265358979323846264338327950288419716939937510",
  "Call 555-123-4567 or +1 (800) 555-0199.",
  "The year 1999 and 2000 and 2024; 10,000,000 and 1.000.000,50",
  "Room 101, floor 7, 42nd street, 1st place, 2nd, 3rd, 4th",
  "0000000000 0001 007",
  "١٢٣٤٥ ०१२३४ 一二三 ①②③ Ⅻ ½ ¾ ²³",
  "v1.2.3-beta.4+build.567",
  "2026-11-22T13:45:30.123Z",
];

const intl = [
  "Café, naïve, résumé, façade, coöperate, jalapeño, Øresund, Ærø, smörgåsbord.",
  "Straße, Größe, Fußgängerübergänge",
  "Ελληνικά: Η γρήγορη καφέ αλεπού",
  "Русский текст: Съешь же ещё этих мягких французских булок.",
  "עברית: שלום עולם",
  "العربية: مرحبا بالعالم",
  "हिन्दी: नमस्ते दुनिया",
  "ไทย: สวัสดีชาวโลก",
  "中文：你好，世界！今天天气很好。",
  "日本語：こんにちは世界。カタカナとひらがな、漢字。",
  "한국어: 안녕하세요 세계",
  "Tiếng Việt: Xin chào thế giới, điều này rất tuyệt vời.",
  "Ｆｕｌｌｗｉｄｔｈ　ＡＢＣ　１２３",
  "e\u0301 (decomposed) vs é (composed); a\u030a vs å",
  "Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǧ̗͚̚o̙̔ͮ̇͐̇ text",
  "ﬁ ﬂ ﬀ ligatures; ŉ ǆ",
  "𝐀𝐁𝐂 𝔸𝔹ℂ mathematical letters",
  "Ǆemal, İstanbul, ıi, Σίσυφος",
];

const emoji = [
  "I love 🍕 and 🍣!",
  "👩‍👩‍👧‍👦 family, 👨‍💻 coder, 🏳️‍🌈 flag",
  "👍🏽👍🏿👋🏻",
  "🇺🇸🇯🇵🇩🇪 flags",
  "❤️ vs ❤ vs ♥",
  "😀😃😄😁😆😅😂🤣🥲☺️😊",
  "Text with emoji at end 🎉",
  "🎉 at start",
  "keycap 1️⃣ #️⃣ and ™ © ®",
  "🧑🏾‍🚀 astronaut, 🫠 melting",
];

const whitespace = [
  "a\u00a0b non-breaking",
  "a\u2003b em space \u3000 ideographic space",
  "word\u2028line separator\u2029paragraph",
  "tabs\tand\tspaces mixed \t \t end",
  "     five spaces then text",
  "text then five spaces     ",
  "many\n\n\n\n\n\nnewlines",
  " \n \n \t\n",
  "\u200bzero\u200bwidth\u200bspace\u200cjoiner\u200d",
];

const specials = [
  "<s> hello </s>",
  "<s>hello</s>",
  "before<|begin_of_text|>after",
  "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>",
  "<unk> and <pad> and <mask>",
  "<|endoftext|>",
  "text<|endoftext|>more",
];

// Very long words and runs.
const long = [
  "a".repeat(1000),
  "ab".repeat(700),
  "supercalifragilisticexpialidocious".repeat(40),
  "9".repeat(1200),
  "1234567890".repeat(120),
  " ".repeat(500),
  "\n".repeat(300),
  "-".repeat(800),
  "é".repeat(400),
  "中".repeat(400),
  "😀".repeat(200),
  "Pneumonoultramicroscopicsilicovolcanoconiosis",
  "Llanfairpwllgwyngyllgogerychwyrndrobwllllantysiliogogogoch",
  "aaaa bbbb ".repeat(150),
  "x".repeat(300) + " " + "y".repeat(300),
  "data:image/png;base64," + "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==".repeat(8),
];

const pieces = [...prose, ...code, ...numbers, ...intl, ...emoji, ...whitespace].filter((s) => s.length > 0);
const separators = [" ", "  ", "\n", "\t", "", " \n ", ", ", "'s ", "'ll ", "1", "  \t"];

// Mixtures: random concatenations of the pieces above, which put every kind of
// boundary (space runs before letters, digits after CJK, emoji in words) side by side.
const mixed = [];
for (let i = 0; i < 90; ++i) {
  const parts = [];
  const count = 2 + Math.floor(rand() * 4);
  for (let k = 0; k < count; ++k) {
    let p = pick(pieces);
    if (rand() < 0.3) p = p.slice(Math.floor(rand() * p.length / 2));  // may cut inside a word
    parts.push(p);
  }
  let s = "";
  for (const p of parts) s += p + pick(separators);
  // Keep strings valid UTF-16 after slicing (no lone surrogates).
  s = s.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "");
  mixed.push(s);
}

const all = [...prose, ...code, ...numbers, ...intl, ...emoji, ...whitespace, ...specials, ...long, ...mixed];
for (const s of all) process.stdout.write(JSON.stringify(s) + "\n");
