#include <nlohmann/json.hpp>

#include "tiergen/io/results.h"

namespace tiergen::io {

std::string result_to_json_line(const ResultRecord& record) {
  // ordered_json: the key order is part of the format (people read these files).
  nlohmann::ordered_json j;
  j["id"] = record.id;
  if (record.error) {
    j["error"] = *record.error;
  } else {
    if (record.prompt) j["prompt"] = *record.prompt;
    if (record.text) j["text"] = *record.text;
    j["token_ids"] = record.token_ids;
    j["finish_reason"] = record.finish_reason;
    j["num_prompt_tokens"] = record.num_prompt_tokens;
    j["num_output_tokens"] = record.num_output_tokens;
  }
  // Generation may stop inside a multi-byte character; replace, never throw.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace tiergen::io
