#pragma once
// A process started with stdin, stdout or stderr closed would hand those descriptor
// numbers to the next files it opens (an offload file, a checkpoint), and results or
// logs written "to stdout" would land in them. The first thing main() does is fill
// any closed one with /dev/null, remembering which were closed, so that writing
// results to a closed stdout can be refused instead of silently lost.
namespace tiergen {

void reopen_closed_standard_streams();
// Whether descriptor `fd` (0, 1 or 2) was closed when the process started.
bool standard_stream_was_closed(int fd);

}  // namespace tiergen
