// SIGINT and SIGTERM during training. While a StopOnSignal lives, the first signal asks the
// run to stop after the step in flight (requested() returns it; the loop saves a
// checkpoint and exits 128 + signal: 130 or 143); a second one ends the process at once,
// with the same code. Outside it, the signals keep their default action. What it says goes
// to stderr, or to the terminal when stderr is a pipe whose reader has gone (core/log.h).
#pragma once

namespace anvil {

class StopOnSignal {
 public:
  explicit StopOnSignal(bool announce);  // announce: say on stderr that a signal arrived
  ~StopOnSignal();                       // restores the previous handlers
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  static int requested();  // the first signal received, or 0
};

}  // namespace anvil
