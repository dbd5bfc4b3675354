#include "analyze/origins.hpp"

#include <algorithm>
#include <optional>
#include <string_view>

#include "analyze/events.hpp"

namespace ptune::analyze {
namespace {

/// Whether a Python frame is library code rather than the training script's: built-ins, and the
/// files of PyTorch, its domain libraries and other installed packages.
bool library_frame(std::string_view f) {
  if (text::starts_with(f, "<")) return true;
  for (const char* p : {"torch/", "torchvision/", "torchaudio/", "torchtext/", "torchdata/", "numpy/", "PIL/",
                        "lightning/", "pytorch_lightning/", "transformers/", "accelerate/", "timm/"})
    if (text::starts_with(f, p) || text::contains(f, (std::string("/") + p).c_str())) return true;
  return text::contains(f, "site-packages/") || text::contains(f, "dist-packages/") ||
         text::contains(f, "/lib/python");
}

/// Where a call came from, from its Python frames (innermost first): "`frame`", or "`frame`,
/// called from `the training code's frame`"; empty without frames.
std::string frames_text(const std::vector<std::string_view>& frames) {
  std::optional<std::string_view> at, user;
  for (const auto& f : frames) {
    if (text::starts_with(f, "<")) continue;  // the built-in method itself
    if (!at) at = f;
    if (!library_frame(f)) {
      user = f;
      break;
    }
  }
  if (!at) return "";
  auto quote = [](std::string_view f) { return "`" + std::string(f.substr(0, 160)) + "`"; };
  if (!user || *user == *at) return quote(*at);
  return quote(*at) + ", called from " + quote(*user);
}

/// The frames of "Call stack" text (frames joined by ";", innermost first).
std::vector<std::string_view> split_stack(std::string_view s) {
  std::vector<std::string_view> out;
  while (!s.empty() && out.size() < 64) {
    const size_t at = s.find(';');
    const std::string_view f = s.substr(0, at);
    if (!f.empty()) out.push_back(f);
    if (at == std::string_view::npos) break;
    s.remove_prefix(at + 1);
  }
  return out;
}

/// For each of `calls`, the Python frames open at its start on its thread (python_function
/// events, with_stack=True), innermost first, at most 64: one sweep per thread over its frames.
std::vector<std::vector<std::string_view>> python_stacks(const Trace& t,
                                                         const std::vector<const Event*>& calls) {
  std::vector<std::vector<std::string_view>> out(calls.size());
  std::map<std::pair<int64_t, int64_t>, std::vector<size_t>> by_thread;
  for (size_t i = 0; i < calls.size(); ++i) by_thread[{calls[i]->pid, calls[i]->tid}].push_back(i);
  std::map<std::pair<int64_t, int64_t>, std::vector<const Event*>> frames;
  for (const auto& e : t.events)
    if (e.python && by_thread.count({e.pid, e.tid})) frames[{e.pid, e.tid}].push_back(&e);
  for (auto& [key, idx] : by_thread) {
    auto& fs = frames[key];
    std::sort(fs.begin(), fs.end(), nests_before);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return calls[a]->ts < calls[b]->ts; });
    std::vector<const Event*> open;
    auto close = [&](double ts) {
      while (!open.empty() && open.back()->end() < ts) open.pop_back();
    };
    size_t next = 0;
    for (size_t i : idx) {
      const double ts = calls[i]->ts;
      for (; next < fs.size() && fs[next]->ts <= ts; ++next) {
        close(fs[next]->ts);
        open.push_back(fs[next]);
      }
      close(ts);
      for (auto it = open.rbegin(); it != open.rend() && out[i].size() < 64; ++it)
        if ((*it)->end() >= ts) out[i].push_back((*it)->name);
    }
  }
  return out;
}

/// "the main thread (4242)" or "thread 4243".
std::string thread_text(const Event& e) {
  return e.tid == e.pid ? "the main thread (" + std::to_string(e.tid) + ")"
                        : "thread " + std::to_string(e.tid);
}

}  // namespace

void Origins::add(const Trace& t, const std::vector<const Event*>& calls,
                  const std::vector<std::string>& names, const std::vector<StepBreakdown>& steps,
                  size_t steps_before) {
  const auto stacks = python_stacks(t, calls);
  // A call belongs to the step whose host range (ProfilerStep#N) it starts in: one of the part's
  // own steps or a neighbour's (a window starts where the previous step's device work ended, so
  // a part's time can hold the next step's first host calls). Numbered from the part's first own
  // step, `steps_before`.
  std::vector<const Event*> host;
  for (const auto& e : t.events)
    if (is_step(e)) host.push_back(&e);
  std::sort(host.begin(), host.end(), [](const Event* a, const Event* b) { return a->ts < b->ts; });
  const auto own = steps.empty() ? host.end()
                                 : std::lower_bound(host.begin(), host.end(), steps.front().host_start,
                                                    [](const Event* x, double v) { return x->ts < v; });
  for (size_t i = 0; i < calls.size(); ++i) {
    const Event& e = *calls[i];
    auto cs = t.call_stacks.find(static_cast<size_t>(&e - t.events.data()));
    std::string where = frames_text(cs != t.call_stacks.end() ? split_stack(cs->second) : stacks[i]);
    const Event* step = nullptr;
    std::ptrdiff_t index = 0;
    if (where.empty()) {
      where = thread_text(e);
      auto s = std::upper_bound(host.begin(), host.end(), e.ts,
                                [](double v, const Event* x) { return v < x->ts; });
      if (s != host.begin() && e.ts < (*std::prev(s))->end() && own != host.end()) {
        step = *std::prev(s);
        index = static_cast<std::ptrdiff_t>(steps_before) + (std::prev(s) - own);
      }
    }
    auto& entry = by[{names[i], where}];
    ++entry.count;
    if (step && index >= 0) entry.steps.emplace(static_cast<size_t>(index), std::string(step->name));
  }
}

std::vector<SyncOrigin> Origins::list() const {
  std::vector<SyncOrigin> out;
  for (const auto& [key, e] : by) {
    std::string where = key.second;
    if (e.steps.size() > 3) {
      where += " in " + std::to_string(e.steps.size()) + " steps, " + e.steps.begin()->second + " to " +
               e.steps.rbegin()->second;
    } else {
      for (const auto& [at, name] : e.steps) where += (at == e.steps.begin()->first ? " in " : ", ") + name;
    }
    out.push_back({key.first, where, e.count});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const SyncOrigin& a, const SyncOrigin& b) { return a.count > b.count; });
  if (out.size() > 10) out.resize(10);
  return out;
}

}  // namespace ptune::analyze
