"""Value embeddings, as the modded-nanogpt speedrun uses them (Jordan et al., github.com/KellerJordan/modded-nanogpt,
records from December 2024 on), a descendant of value residual learning (Zhou et al., arXiv 2410.17897), described:
its config field, its tables and its costs; the module: methods/value_embeddings.py.

A few embedding tables of the token ids, each `num_key_value_heads * head_dim` wide, are mixed into the values of
chosen unrolled steps before sequence attention: `V'_u = lambda_1 V_u + lambda_2 E_t(u)[token]`, with learned
scalars per chosen step. `value_embedding_pattern` gives, per unrolled step, the digit of the table it reads or
"." for none, as the speedrun's records write it; its default is the speedrun's pattern scaled to the depth:
three tables read by the first three steps and again by the last three (`012..012` at 8 steps; fewer tables when
the depth is under six). The mixed value takes the plain
value's KV-cache slot; the value embedding of a token is recomputed from its id, so nothing is kept across tokens.

Parameters: `tables * vocab_size * Hkv * head_dim` (they grow with the vocabulary) plus 2 per chosen step.
Inference state: none beyond vanilla's KV cache; the token ids, which every decoder has.
"""

from __future__ import annotations

from .base import AttentionMixerDescription, ConfigField, FlopTerm


def speedrun_pattern(depth: int, tables: int = 3) -> str:
    """Tables 0, 1, 2 on the first three steps and again on the last three, none between ("012......012" for 12
    steps); at a depth under six, `depth // 2` tables on each side."""
    used = "".join(map(str, range(min(tables, depth // 2))))
    return used + "." * (depth - 2 * len(used)) + used


class ValueEmbeddingsDescription(AttentionMixerDescription):
    module = "depthattn.methods.value_embeddings:ValueEmbeddings"
    config_fields = {
        "value_embedding_pattern": ConfigField(None, (
            'One character per unrolled step: the digit of the value-embedding table it mixes into its value, or "." '
            'for none (e.g. "012..012"); `None` means the speedrun\'s pattern scaled to the depth (three tables on the '
            "first three and the last three steps).")),
    }
    checked_variants = {"pattern": {"value_embedding_pattern": ".0.1"}}  # steps without a table, two tables
    inference_state = (
        "Across tokens: none; the KV cache has vanilla's size (mixed values in the value slots). Per token while "
        "it is processed: nothing beyond its id; each chosen step looks up its table row (Hkv x head_dim)."
    )

    @classmethod
    def check_tensor_parallel(cls, config, ranks: int):
        if ranks > 1:
            raise ValueError("value_embeddings are not sharded across tensor-parallel ranks; serve it with "
                             "tensor_parallel_size=1")

    @classmethod
    def check_config(cls, config):
        pattern = config.value_embedding_pattern
        if pattern is None:
            return
        if not isinstance(pattern, str) or len(pattern) != config.unrolled_depth or set(pattern) - set(".0123456789"):
            raise ValueError(f'value_embedding_pattern must have one character per unrolled step '
                             f'({config.unrolled_depth}), a table digit or "." (e.g. "012..012"), or be None for the '
                             f"speedrun's pattern; got {pattern!r}")
        used = {int(c) for c in pattern if c != "."}
        if used != set(range(len(used))):
            raise ValueError(f"value_embedding_pattern must use the tables 0 .. n-1 without gaps, got {pattern!r}")

    @staticmethod
    def layer_tables(config) -> list[int | None]:
        """The table of every unrolled step, or None."""
        pattern = config.value_embedding_pattern or speedrun_pattern(config.unrolled_depth)
        return [None if c == "." else int(c) for c in pattern]

    @classmethod
    def table_count(cls, config) -> int:
        return len({t for t in cls.layer_tables(config) if t is not None})

    @staticmethod
    def step_sources(config):
        return [[] for _ in range(config.unrolled_depth)]  # its tables, not an earlier step, are what it mixes in

    @classmethod
    def chosen_steps(cls, config) -> int:
        return sum(t is not None for t in cls.layer_tables(config))

    @classmethod
    def extra_parameters(cls, config):
        width = config.num_key_value_heads * config.head_dim
        return cls.table_count(config) * config.vocab_size * width + 2 * cls.chosen_steps(config)

    @classmethod
    def flop_terms(cls, config):
        # V' = lambda_1 V + lambda_2 E: a weighted sum of 2 vectors, 2 * 2 d_kv, as value residual; the lookup is free
        d_kv = config.num_key_value_heads * config.head_dim
        return [FlopTerm("value mix lambda_1 V_u + lambda_2 E[token], chosen steps",
                         4 * d_kv * cls.chosen_steps(config), "elementwise")]

    @classmethod
    def io_elements(cls, config):
        # per chosen step: read V_u and the table row, write V'_u
        d_kv, chosen = config.num_key_value_heads * config.head_dim, cls.chosen_steps(config)
        return {"read": 2 * chosen * d_kv, "write": chosen * d_kv}

    @classmethod
    def extra_state_elements(cls, config, context):
        return 0  # a table row is looked up from the token id when it is needed

    @classmethod
    def cost_details(cls, config):
        return {"value_embedding_tables": cls.table_count(config),
                "value_embedding_steps": [u for u, t in enumerate(cls.layer_tables(config)) if t is not None]}
