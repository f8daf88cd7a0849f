"""PyTorch's own bf16-vs-fp64 deviation on a golden fixture's 8-step AdamW run: the figures the
GPU test tests/cuda/test_cuda_model.cpp (EightAdamWSteps) derives its tolerances from.

usage: python3 bench/bf16_adamw_deviation.py FIXTURE_DIR [--device cuda|cpu]

Runs the fixture's 8 batches (golden_adamw.safetensors) with fp32 master weights and bf16
autocast (sdpa attention, as make_golden_model.py's bf16_autocast_fp32_master curve), with the
settings of golden_curve.json, and prints one JSON object: the worst per-step relative error
of loss and gradient norm against the fp64 curve, and the final parameters' relative L2 error
against the fp64 ones (per tensor, worst, and over all parameters). The same for a no-op
update (lr 0), which the test's tolerances must reject.
"""
import argparse
import json
import os

os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import torch  # noqa: E402
from safetensors.torch import load_file  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def run(fixture, device, lr_scale):
    curve = json.load(open(f"{fixture}/golden_curve.json"))
    cc = curve["config"]
    gold = load_file(f"{fixture}/golden_adamw.safetensors")
    model = AutoModelForCausalLM.from_pretrained(fixture, dtype=torch.float32, attn_implementation="sdpa").to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cc["lr"] * lr_scale, betas=tuple(cc["betas"]), eps=cc["eps"],
                            weight_decay=cc["weight_decay"])
    loss_err = norm_err = 0.0
    for i in range(cc["steps"]):
        x = gold[f"batch{i}"].to(device)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=cc["max_norm"])
        opt.step()
        opt.zero_grad()
        want = curve["fp64"][i]
        loss_err = max(loss_err, abs(loss.item() - want["loss"]) / abs(want["loss"]))
        norm_err = max(norm_err, abs(gn.item() - want["grad_norm"]) / abs(want["grad_norm"]))
    num = den = 0.0
    worst, worst_name = 0.0, ""
    for n, p in model.named_parameters():
        w = gold["param." + n].double()
        d = (p.detach().double().cpu() - w).norm().item()
        e = d / w.norm().item()
        num, den = num + d * d, den + w.norm().item() ** 2
        if e > worst:
            worst, worst_name = e, n
    return {"loss_rel": loss_err, "grad_norm_rel": norm_err, "param_rel_l2_worst": worst,
            "param_rel_l2_worst_tensor": worst_name, "param_rel_l2_all": (num / den) ** 0.5}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = ap.parse_args()
    torch.manual_seed(0)
    out = {"fixture": os.path.basename(os.path.normpath(a.fixture)), "device": a.device,
           "bf16_autocast": run(a.fixture, a.device, 1.0), "no_op_lr0": run(a.fixture, a.device, 0.0)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
