#!/usr/bin/env python3
"""Dev-time: the per-row figure of an fp8-activation GEMM (RAD_EXACT_F8ACT, docs/OPS.md "fp8
activations") on outlier-free rows, and how much of the per-output bound it uses.

x (64 rows) and W (256 rows) normal, K in 512, 1536, 4096; x quantised per row and 128-group to
e4m3 with scale amax / 448 (torch's float8_e4m3fn cast: nearest even, saturating), W exact, the
products summed in f64. Prints the per-row measure max_j |y - ref| / max_j |ref| (max and mean
over rows) and the largest share of the bound
    sum_k |w_k| (0.0625 |x_k| + 0.001 s_g) + 0.01 sum_k |x_k w_k|
an output uses. The kernels state 5e-2, over the largest figure here.

    /work/venv-hf/bin/python scripts/f8act-figure.py
"""
import torch


def main():
    torch.manual_seed(0)
    for K in (512, 1536, 4096):
        N, M = 256, 64
        x = torch.randn(M, K)
        w = torch.randn(N, K) / K ** 0.5
        g = x.view(M, K // 128, 128)
        s = g.abs().amax(-1, keepdim=True) / 448
        xq = ((g / s).to(torch.float8_e4m3fn).float() * s).view(M, K)
        ref, y = x.double() @ w.double().T, xq.double() @ w.double().T
        row = (y - ref).abs().amax(1) / ref.abs().amax(1)
        sk = s.expand(-1, -1, 128).reshape(M, K).double()
        bound = (0.0725 * x.abs().double()) @ w.abs().double().T + 0.001 * sk @ w.abs().double().T
        print(f"K {K:5d}: per-row measure max {row.max():.3e}, mean {row.mean():.3e}; "
              f"largest share of the bound {((y - ref).abs() / bound).max():.3f}")


if __name__ == "__main__":
    main()
