#pragma once
/// What `ptune launch` starts on this node, as plain data: the command line fills it (apps/ptune)
/// and dist::launch (dist/launcher.hpp) starts the ranks from it.

#include <string>
#include <vector>

namespace ptune::system {

struct LaunchOptions {
  int nproc_per_node = 1;              // ranks to start on this node
  int nnodes = 1;                      // nodes (one launch each) in the run
  int node_rank = 0;                   // this node, 0 .. nnodes-1; node 0 runs global rank 0
  int master_port = 29500;             // rendezvous port; 0 = pick a free one now (one node only)
  std::string master_addr;             // rendezvous host, node 0's address (rank 0 serves the
                                       // store there); "" = 127.0.0.1, one node only
  std::vector<std::string> args;       // the ptune command line every rank runs (after --)
  std::string exe = "/proc/self/exe";  // the program every rank runs
  double grace_s = 5.0;                // SIGTERM, then SIGKILL after this many seconds
  bool prefix = true;                  // "[rank R] " before every stderr line (logs, errors)
  bool prefix_stdout = false;          // ... and before every stdout line too
};

}  // namespace ptune::system
