"""Renders tests/chat/conversations.jsonl with the chat templates of templates.json
through Python's jinja2, set up as Hugging Face's apply_chat_template sets it up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls, its tojson
and raise_exception, tools=None, documents=None), as the reference that tiergen's
renderings must equal. Usage: python3 render_reference.py OUT.jsonl
Writes one line per (template, conversation): {"template", "conversation", "text"}
or, where the template raises, {"template", "conversation", "error"}."""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main(out_path):
    here = os.path.dirname(os.path.abspath(__file__))
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    with open(os.path.join(here, "templates.json"), encoding="utf-8") as f:
        templates = json.load(f)
    with open(os.path.join(here, "conversations.jsonl"), encoding="utf-8") as f:
        conversations = [json.loads(line) for line in f if line.strip()]
    lines = []
    for name, t in templates.items():
        template = env.from_string(t["chat_template"])
        for i, messages in enumerate(conversations):
            record = {"template": name, "conversation": i}
            try:
                record["text"] = template.render(messages=messages, tools=None, documents=None,
                                                 add_generation_prompt=True, bos_token=t["bos_token"],
                                                 eos_token=t["eos_token"])
            except jinja2.exceptions.TemplateError as e:
                record["error"] = str(e)
            lines.append(json.dumps(record, ensure_ascii=False))
    with open(out_path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
