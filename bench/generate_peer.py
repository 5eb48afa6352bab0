"""The PyTorch peer of `zero generate`: greedy decoding of a Hugging Face GPT-2 directory
(model.safetensors + config.json, as `zero convert CKPT DIR/` writes) with transformers'
GPT2LMHeadModel and its KV cache (past_key_values), fp32 on the CPU.

Timed as `zero generate` times itself: the prompt prefilled, the first token taken, then
decode tokens/s = (new - 1) x batch / the time from the first token to the last. Prints one
JSON object: decode_tokens_per_s, ttft_s, the tokens of sequence 0.

Usage: python generate_peer.py --model DIR --prompt-ids 1,2,3 --batch B --new N --threads T
(a Python with torch and transformers: bench/bench_generate_peer.sh finds one).
"""
import argparse
import json
import time

import torch
from transformers import GPT2LMHeadModel


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--prompt-ids", required=True)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    model = GPT2LMHeadModel.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    prompt = [int(x) for x in a.prompt_ids.split(",")]
    ids = torch.tensor([prompt] * a.batch)
    tokens = []
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(ids, use_cache=True)
        nxt = out.logits[:, -1].argmax(-1, keepdim=True)
        t_first = time.perf_counter()
        tokens.append(int(nxt[0, 0]))
        for _ in range(a.new - 1):
            out = model(nxt, past_key_values=out.past_key_values, use_cache=True)
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(int(nxt[0, 0]))
        decode_s = time.perf_counter() - t_first
    print(json.dumps({"decode_tokens_per_s": (a.new - 1) * a.batch / decode_s,
                      "ttft_s": t_first - t0, "tokens": tokens, "batch": a.batch,
                      "threads": a.threads, "torch": torch.__version__}))


main()
