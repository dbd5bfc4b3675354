#pragma once
/// The precision a GPU matrix kernel (a GEMM or a convolution) computes in, read from the name
/// its library gives it: cuBLAS (`ampere_sgemm_128x64_nn`, `sm90_xmma_gemm_bf16bf16_bf16f32_...`,
/// `volta_fp16_s884gemm_fp16_...`), cuDNN (`sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_...`,
/// `implicit_convolve_sgemm`) and CUTLASS (`cutlass_80_tensorop_s1688gemm_...`: TF32 on Tensor
/// Cores; `cutlass_80_simt_sgemm_...`: plain fp32). A heuristic over the names' conventions, as
/// the TensorBoard plugin's Tensor Core test was.

#include <string>
#include <string_view>

namespace ptune::analyze {

/// "fp8", "int8", "bf16", "fp16", "tf32" or "fp32" (plain fp32 on the CUDA cores: sgemm, SIMT);
/// "" where the name names none of these (an elementwise or layout kernel, an unknown family).
/// Throws nothing.
std::string kernel_precision(std::string_view name);

}  // namespace ptune::analyze
