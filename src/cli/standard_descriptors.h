// The standard descriptors (stdin, stdout, stderr) made sure to be open when the process starts, and
// whether stdout was. Not thread-safe: called at the top of main, before any thread starts.
#pragma once

namespace sluice::cli {

// Opens /dev/null onto each of descriptors 0, 1 and 2 that is closed, as daemons do. A process
// started with one closed (`>&-`, a supervisor that passes on nothing) would otherwise give that
// number to the first descriptor it opens, an eventfd or a socket, and what it writes to stdout (the
// access log) or stderr would go into that. Exits 1 when /dev/null cannot be opened.
void open_standard_descriptors();

// Whether stdout was closed when the process started (it is /dev/null now).
bool stdout_was_closed();

}  // namespace sluice::cli
