"""The configs `hf:NAME` builds from: published sizes, shipped so no target ever needs a
download. Data only (no transformers import): `gobrrr --help` and error messages read it.

A library's default config is no small model (`LlamaConfig()` is LLaMA-7B), so every
entry names its sizes. Fields not named keep the Config class's defaults, which for these
entries equal the published config.json (GPT2Config's and BertConfig's defaults are
GPT-2 small's and bert-base-uncased's own); where they do not, the entry names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["HFConfig", "HF_CONFIGS", "hf_config", "known_hf_names"]


@dataclass(frozen=True)
class HFConfig:
    name: str  # what follows "hf:"
    model_type: str  # AutoConfig.for_model's key
    head: str  # "causal_lm" (loss: next token) or "masked_lm" (loss: every token)
    fields: dict[str, Any]  # the published sizes; the rest are the Config class defaults
    source: str  # the published config.json these numbers come from
    hub_ids: tuple[str, ...] = ()  # names the same model has on the Hub (aliases)
    about: str = ""


def _gpt2(name: str, layers: int, width: int, heads: int, about: str) -> HFConfig:
    # vocab_size 50257 and n_positions 1024 are the same for every GPT-2 size.
    return HFConfig(
        name, "gpt2", "causal_lm",
        {"n_layer": layers, "n_embd": width, "n_head": heads, "n_positions": 1024,
         "vocab_size": 50257},
        f"https://huggingface.co/openai-community/{name}/blob/main/config.json",
        (f"openai-community/{name}",), about)


def _bert(name: str, layers: int, width: int, heads: int, ffn: int, about: str) -> HFConfig:
    return HFConfig(
        name, "bert", "masked_lm",
        {"num_hidden_layers": layers, "hidden_size": width, "num_attention_heads": heads,
         "intermediate_size": ffn, "max_position_embeddings": 512, "vocab_size": 30522,
         "type_vocab_size": 2},
        f"https://huggingface.co/google-bert/{name}/blob/main/config.json",
        (f"google-bert/{name}",), about)


HF_CONFIGS: dict[str, HFConfig] = {c.name: c for c in (
    # GPT-2 (Radford et al. 2019, Table 2): 12/24/36/48 layers, d_model 768/1024/1280/1600;
    # heads (d_model / 64) as in each size's config.json.
    _gpt2("gpt2", 12, 768, 12, "GPT-2 small, 124M parameters"),
    _gpt2("gpt2-medium", 24, 1024, 16, "GPT-2 medium, 355M parameters"),
    _gpt2("gpt2-large", 36, 1280, 20, "GPT-2 large, 774M parameters"),
    _gpt2("gpt2-xl", 48, 1600, 25, "GPT-2 XL, 1.5B parameters"),
    # BERT (Devlin et al. 2019, section 3): base L=12 H=768 A=12, large L=24 H=1024 A=16,
    # feed-forward 4H. The released checkpoints are BertForMaskedLM (their config.json's
    # "architectures"), so the masked-LM head is part of the workload.
    _bert("bert-base-uncased", 12, 768, 12, 3072, "BERT base, 110M parameters"),
    _bert("bert-large-uncased", 24, 1024, 16, 4096, "BERT large, 340M parameters"),
    # TinyLlama (Zhang et al. 2024): the LLaMA-2 architecture at 1.1B, grouped-query
    # attention (4 key/value heads for 32 query heads). rms_norm_eps differs from
    # LlamaConfig's default (1e-6); everything else left out is LlamaConfig's default
    # (silu, rope theta 10000, untied embeddings, no biases).
    HFConfig(
        "tinyllama-1.1b", "llama", "causal_lm",
        {"hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
         "num_attention_heads": 32, "num_key_value_heads": 4,
         "max_position_embeddings": 2048, "vocab_size": 32000, "rms_norm_eps": 1e-5,
         "tie_word_embeddings": False},
        "https://huggingface.co/TinyLlama/TinyLlama-1.1B-Chat-v1.0/blob/main/config.json",
        ("TinyLlama/TinyLlama-1.1B-Chat-v1.0",
         "TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T"),
        "TinyLlama 1.1B, a LLaMA-2-style decoder"),
    # Qwen2.5-0.5B (Qwen team 2024): a LLaMA-like decoder with biased q/k/v projections,
    # 7:1 grouped-query attention (2 key/value heads for 14), a 152k vocabulary whose
    # embedding is tied to the output head (a third of the weights) and rope theta 1e6.
    HFConfig(
        "qwen2.5-0.5b", "qwen2", "causal_lm",
        {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
         "num_attention_heads": 14, "num_key_value_heads": 2,
         "max_position_embeddings": 32768, "vocab_size": 151936, "rms_norm_eps": 1e-6,
         "rope_theta": 1000000.0, "tie_word_embeddings": True, "use_sliding_window": False},
        "https://huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json",
        ("Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-0.5B-Instruct"),
        "Qwen2.5 0.5B, a Qwen2 decoder (GQA, tied 152k-token embedding)"),
)}


def known_hf_names() -> list[str]:
    return list(HF_CONFIGS)


def hf_config(name: str) -> HFConfig | None:
    """The entry for `name` or one of its Hub ids (case-insensitive); None if unknown."""
    key = name.lower()
    for c in HF_CONFIGS.values():
        if key == c.name.lower() or key in (h.lower() for h in c.hub_ids):
            return c
    return None
