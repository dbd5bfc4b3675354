// A training engine of another build, for the e2e test that the ptune executable refuses one:
// the entry points of apps/ptune/engine.cpp with a build ID no real build has.
extern "C" {
__attribute__((visibility("default"))) int ptune_engine_run(const void*) { return 99; }
__attribute__((visibility("default"))) void ptune_engine_finish(bool) {}
__attribute__((visibility("default"))) const char* ptune_engine_build_id() { return "0000000000000000"; }
}
