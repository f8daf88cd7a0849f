#include "train/stop_signal.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/log.h"

namespace anvil {
namespace {

volatile sig_atomic_t g_requested = 0;
volatile sig_atomic_t g_announce = 0;
struct sigaction g_previous[2];

void say(const char* text) {
  if (g_announce) write_or_terminal(2, text, std::strlen(text));
}

void on_signal(int sig) {
  if (g_requested != 0) {
    say("\nanvil: second signal: stopping at once\n");
    ::_exit(128 + g_requested);
  }
  g_requested = sig;
  const int saved_errno = errno;  // the interrupted code's
  say(sig == SIGINT ? "\nanvil: SIGINT: stopping after the step in flight (send it again to stop at once)\n"
                    : "\nanvil: SIGTERM: stopping after the step in flight (send it again to stop at once)\n");
  errno = saved_errno;
}

}  // namespace

StopOnSignal::StopOnSignal(bool announce) {
  g_requested = 0;
  g_announce = announce ? 1 : 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, &g_previous[0]);
  ::sigaction(SIGTERM, &sa, &g_previous[1]);
}

StopOnSignal::~StopOnSignal() {
  ::sigaction(SIGINT, &g_previous[0], nullptr);
  ::sigaction(SIGTERM, &g_previous[1], nullptr);
}

int StopOnSignal::requested() { return g_requested; }

}  // namespace anvil
