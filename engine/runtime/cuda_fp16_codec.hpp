// The fp16 codec of the cuda device (LDFG's compressed swaps; memweave/swap/fp16_codec.hpp):
// conversion kernels on the copy streams, through a device staging buffer per direction.
// Private to the cuda backend: the kernel launcher hands it to the transfer engine
// (kernel_launcher::fp16_codec_factory).
#pragma once

#include <memory>

#include "memweave/device/device.hpp"
#include "memweave/swap/fp16_codec.hpp"

namespace memweave {

/// The codec for cuda device `dev` (which must outlive it). Its device and pinned memory
/// (two staging buffers of 2 MiB and two words) is taken at the first compressed transfer,
/// or by reserve().
std::unique_ptr<fp16_codec> make_cuda_fp16_codec(device& dev);

}  // namespace memweave
