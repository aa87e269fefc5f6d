"""Finding text in an ONNX model that is not UTF-8.

ONNX's protobuf schema is proto2, whose ``string`` fields are not checked when a
file is parsed: a name, op type, ``dim_param`` or external-data location that is
not UTF-8 comes back as ``bytes``, and would fail later in whatever first treats
it as text, with a message that says neither what nor where.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from polyhal.errors import SerializationError, shown


def check_text(message: Message, label: str, path: str = "model") -> None:
    """Raise a :class:`SerializationError` naming the first string field of
    ``message`` (walked depth first) that is not UTF-8, as ``label: PATH``."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            texts = value if _repeated(field) else [value]
            for index, text in enumerate(texts):
                if isinstance(text, bytes):
                    where = f"{path}.{field.name}" + (f"[{index}]" if _repeated(field) else "")
                    raise SerializationError(f"{label}: {where} is not UTF-8 text: "
                                             f"{shown(text)}")
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            if _repeated(field):
                for index, item in enumerate(value):
                    check_text(item, label, f"{path}.{field.name}[{index}]")
            else:
                check_text(value, label, f"{path}.{field.name}")


def _repeated(field: FieldDescriptor) -> bool:
    repeated = getattr(field, "is_repeated", None)  # protobuf 6 dropped ``label``
    return bool(repeated) if repeated is not None else (
        field.label == FieldDescriptor.LABEL_REPEATED)
