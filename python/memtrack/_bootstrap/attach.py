# Run by `memtrack attach` inside the attached process, from a pending call on its main
# thread (src/record/attach/): load this folder's copy of the agent under a name of its own
# (never the `_memtrack_agent` of `memtrack record`, nor the wheel's) and start it. The
# globals `_file` and `_page` come from the injected line; nothing is left in __main__.


def _memtrack_boot(here, page):
    import importlib
    import importlib.util
    import os
    import sys

    name = "_memtrack_attach_" + "".join(c if c.isalnum() else "_" for c in os.path.basename(here))
    folder = os.path.join(here, "agent", "_memtrack_agent")
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(folder, "__init__.py"), submodule_search_locations=[folder]
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        attach = importlib.import_module(name + ".attach")
    except BaseException:
        for m in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            sys.modules.pop(m, None)
        raise
    attach.run(os.path.join(here, "attach.json"), page)


try:
    _memtrack_boot(__import__("os").path.dirname(_file), _page)  # noqa: F821
except BaseException:
    pass
