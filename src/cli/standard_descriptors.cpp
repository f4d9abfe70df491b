#include "cli/standard_descriptors.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace sluice::cli {
namespace {

bool stdout_closed = false;

}  // namespace

void open_standard_descriptors() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // The lowest free number, which is fd: those below it are open by now.
    const int opened = ::open("/dev/null", O_RDWR);
    if (opened != fd) {
      const int error = opened < 0 ? errno : EBADF;
      std::fprintf(stderr, "sluice: descriptor %d is closed and /dev/null cannot be opened onto it (%s)\n", fd,
                   std::strerror(error));
      std::exit(1);
    }
    if (fd == STDOUT_FILENO) stdout_closed = true;
  }
}

bool stdout_was_closed() { return stdout_closed; }

}  // namespace sluice::cli
