#pragma once
// One JSONL prompt line -> PromptRecord. The kind of object (plain prompt, token ids,
// OpenAI batch request) is decided per line; see tiergen/io/prompts.h for the formats.
#include <cstdint>
#include <string>
#include <string_view>

#include "tiergen/io/prompts.h"

namespace tiergen::io {

// Parses `text` (one line, without '\n'/'\r') as the prompt at `index` on line `line`
// of file `name`. Throws tiergen::Error starting "name:line: " for a line that is not
// JSON; a JSON line with bad or unsupported fields comes back with `error` set.
PromptRecord parse_jsonl_prompt(std::string_view text, const std::string& name, int64_t line,
                                int64_t index);

}  // namespace tiergen::io
