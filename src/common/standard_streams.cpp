#include "tiergen/common/standard_streams.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace tiergen {

namespace {

bool closed_at_start[3] = {false, false, false};

}  // namespace

void reopen_closed_standard_streams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free descriptor: this one, as the lower ones are open.
    const int opened = ::open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {
      ::dup2(opened, fd);
      ::close(opened);
    }
    closed_at_start[fd] = true;
  }
}

bool standard_stream_was_closed(int fd) { return fd >= 0 && fd <= 2 && closed_at_start[fd]; }

}  // namespace tiergen
