"""Names the stream refers to by id (module fqns, optimizer classes): each announced once."""

from . import transport
from .protocol import MSG_NAME

_names = {}  # name -> id


def name_id(name):
    i = _names.get(name)
    if i is None:
        i = _names[name] = len(_names)
        transport.write_json({"t": MSG_NAME, "id": i, "name": name})
    return i
