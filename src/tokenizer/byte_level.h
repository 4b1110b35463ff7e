#pragma once
// GPT-2's reversible byte <-> printable-character mapping ("bytes_to_unicode"), used
// by byte-level BPE vocabularies (GPT-2, OPT, LLaMA-3). The encoder works on raw
// bytes; this mapping is only needed to translate vocabulary strings at load time
// and for token_to_id / id_to_token.
#include <string>
#include <string_view>

namespace tiergen::tokenizer {

// The code point that stands for byte b in byte-level vocabularies.
char32_t byte_to_char(unsigned char b);

// The byte that code point cp stands for, or -1 when cp is not part of the mapping.
int char_to_byte(char32_t cp);

// Translates a byte-level vocabulary string to the raw bytes it stands for. Returns
// false (out unspecified) when a character is outside the mapping.
bool byte_level_to_bytes(std::string_view token, std::string& out);

// The byte-level vocabulary spelling of raw bytes (for diagnostics and tests).
std::string bytes_to_byte_level(std::string_view bytes);

// The byte a SentencePiece byte-fallback token stands for ("<0x41>" -> 0x41; upper-case
// hex digits, as those vocabularies spell them); -1 for any other token.
int parse_byte_token(std::string_view token);

}  // namespace tiergen::tokenizer
