#pragma once
/// What a host operator computes and moves, from the inputs torch.profiler records of it
/// (record_shapes=True): PyTorch's with_flops formulas, 2 per multiply-add of convolutions and
/// matrix products, 1 per element of add and mul; the backward convolution (which PyTorch's
/// formulas leave out) its forward's FLOPs once per gradient it computes, as
/// torch.utils.flop_counter does. Counted once per operator as the trace is read.

#include <string_view>

#include "analyze/trace_reader.hpp"

namespace ptune::analyze {

/// The cost of one call of host operator `name` with inputs `in`: the trace's "flops" where it
/// gives them (an operator of no class with FLOPs: class "other"); cls nullptr when it is not
/// counted. Throws nothing.
OpCost op_cost(std::string_view name, const OpInputs& in);

}  // namespace ptune::analyze
