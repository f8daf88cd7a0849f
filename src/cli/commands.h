// The subcommands of anvil. Each takes the arguments after its own name, parses them into
// its options struct (cli/args.h) and calls one library function; it returns the process
// exit code. Errors are thrown as anvil::Error and turned into one line by main().
#pragma once

namespace anvil {

int cmd_init(int argc, char** argv);
int cmd_grad(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_prepare(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_topo(int argc, char** argv);
int cmd_export(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_generate(int argc, char** argv);

}  // namespace anvil
