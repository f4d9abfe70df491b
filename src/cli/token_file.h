// An admin token read from a file (--token-file), so that it is not in the process's command line
// (which any user of the host may read in /proc/PID/cmdline, for as long as a follower runs).
#pragma once

#include <fstream>
#include <string>

#include "sluice/result.h"

namespace sluice::cli {

// The file's first line, without the spaces around it (a trailing newline, say).
inline Result<std::string> read_token_file(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return invalid_argument("cannot read a token from " + path);
  const std::size_t first = line.find_first_not_of(" \t\r");
  const std::size_t last = line.find_last_not_of(" \t\r");
  if (first == std::string::npos) return invalid_argument(path + " holds no token on its first line");
  return line.substr(first, last - first + 1);
}

}  // namespace sluice::cli
