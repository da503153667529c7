"""Count which experts a Hugging Face MoE model's routers pick, token by token, over a list of texts.

Run as a script by :func:`offload_lab.fit.routing.collect_hf` with a Python that has torch and transformers (the server
environment); it imports nothing from offload_lab, so it runs where offload_lab is not installed. Reads a JSON
request on stdin::

    {"model": DIR, "texts": [...], "max_tokens": 512, "top_k": null}

and writes one JSON object on stdout: the MoE layers' indices, experts per layer, top_k, and for every text its token
count and counts[layer][expert] (how many of its tokens each router sent to each expert). Counting is from the router
logits of a teacher-forced forward pass (``output_router_logits=True``): a prompt's tokens are routed exactly as they
would be if the model had generated them one at a time. Top-k of the logits equals top-k of the softmax.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    req = json.load(sys.stdin)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(req["model"])
    tok = AutoTokenizer.from_pretrained(req["model"])
    model = AutoModelForCausalLM.from_pretrained(req["model"], dtype=torch.float32)
    model.eval()
    top_k = int(req.get("top_k") or cfg.num_experts_per_tok)
    # MoE layers are those whose MLP has a router; router_logits come back in that order.
    layers = [i for i, layer in enumerate(model.model.layers) if hasattr(layer.mlp, "gate")
              and hasattr(layer.mlp, "experts")]
    n_experts = int(getattr(cfg, "num_experts", 0) or getattr(cfg, "n_routed_experts", 0)
                    or getattr(cfg, "num_local_experts", 0))
    out = {"model_type": cfg.model_type, "layers": layers, "num_experts": n_experts, "top_k": top_k, "texts": [],
           "torch": torch.__version__}
    import transformers

    out["transformers"] = transformers.__version__
    with torch.no_grad():
        for text in req["texts"]:
            ids = tok(text, return_tensors="pt", truncation=True, max_length=int(req.get("max_tokens", 512)))
            n = int(ids["input_ids"].shape[1])
            result = model(**ids, output_router_logits=True, use_cache=False)
            logits = result.router_logits
            if len(logits) != len(layers):
                raise SystemExit(f"got router logits for {len(logits)} layers, expected {len(layers)}")
            counts = []
            for lg in logits:
                lg = lg.reshape(-1, lg.shape[-1])[-n:]  # [tokens, experts] (batch of one)
                chosen = torch.topk(lg.float(), top_k, dim=-1).indices.reshape(-1)
                counts.append(torch.bincount(chosen, minlength=n_experts).tolist())
            out["texts"].append({"tokens": n, "counts": counts})
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
