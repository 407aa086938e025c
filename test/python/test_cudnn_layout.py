"""runtime/plan.py's reading of the memory format cuDNN writes a convolution in (CPU-only:
the layout rule itself; test/python/gpu/test_trust_gpu_corpus.py runs the convolutions)."""
import itertools

import torch
from torch._prims_common import suggest_memory_format

from mlircap.runtime.plan import _channels_last_strides, _cudnn_writes_channels_last


def test_channels_last_strides_follow_torch():
    for shape in itertools.product([1, 2, 3], [1, 2, 4], [1, 2], [1, 3]):
        for fmt in (torch.contiguous_format, torch.channels_last):
            t = torch.empty(shape).contiguous(memory_format=fmt)
            for v in (t, t.permute(0, 2, 3, 1).permute(0, 3, 1, 2), t[:, :, :, :1]):
                assert _channels_last_strides(v) == (suggest_memory_format(v) == torch.channels_last), \
                    (shape, fmt, v.stride())


def test_single_channel_nhwc_operands_are_written_nchw():
    # the plan's NHWC views of a (1, 1, 6, 5) input and an (8, 1, 5, 5) filter, as torch sees them
    x = torch.empty(30).as_strided((1, 6, 5, 1), (30, 5, 1, 30)).permute(0, 3, 1, 2)
    w = torch.empty(200).as_strided((8, 5, 5, 1), (25, 5, 1, 25)).permute(0, 3, 1, 2)
    assert not _cudnn_writes_channels_last(x, w)
    x3 = torch.empty(1, 6, 5, 3).permute(0, 3, 1, 2)
    w3 = torch.empty(8, 5, 5, 3).permute(0, 3, 1, 2)
    assert _cudnn_writes_channels_last(x3, w3)
    assert not _cudnn_writes_channels_last(x3.double(), w3.double())   # float64: always NCHW
    assert not _cudnn_writes_channels_last(torch.empty(1, 3, 6, 5), torch.empty(8, 3, 5, 5))
