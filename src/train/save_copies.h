// --on-save CMD: after each complete checkpoint, CMD runs in the background with the
// checkpoint's folder as its argument (sh -c 'CMD "$1"'), so training goes on while it
// copies the checkpoint off the machine. Its output is collected, not shown; when it ends
// the run says so, and a failure is reported with its exit code and last line of output.
// The copies run in their own process group: a Ctrl-C meant for the run does not cut them
// short, and the run waits for them at its end.
//
// pinned() lists what --keep-last must not delete: checkpoints whose copy is still
// running, and the newest one whose copy succeeded.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace anvil {

class SaveCopies {
 public:
  explicit SaveCopies(std::string command);
  ~SaveCopies();  // waits for running copies
  SaveCopies(const SaveCopies&) = delete;
  SaveCopies& operator=(const SaveCopies&) = delete;

  void start(const std::string& checkpoint);
  void report_finished();  // logs the copies that ended since the last call
  std::vector<std::string> pinned() const;
  // Waits for every running copy and reports each; returns how many failed overall.
  int wait_all();

 private:
  struct Copy {
    std::string checkpoint;
    int pid = -1;
    int out = -1;  // read end of its stdout and stderr
    std::thread reader;
    bool done = false, reported = false;
    int status = 0;
    std::string last_line;
    double seconds = 0;
  };
  void watch(Copy& c);  // on the copy's reader thread
  void report(Copy& c);

  std::string command_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Copy>> copies_;
  std::string newest_ok_;
  int failed_ = 0;
};

}  // namespace anvil
