"""Tokenizer and chat-template oracle for tests/test_data_oracle.cpp: Hugging Face's
tokenizers (ids, decode) and transformers' apply_chat_template (renderings, ids).

usage: tokenizer_oracle.py TOKENIZER_DIR IN.jsonl OUT.jsonl

One output line per input line:
  {"text": s}                          -> {"ids": [...], "decoded": s}
      tokenizers' encode without added special tokens, and decode of those ids
  {"messages": [...], "chat_template"?: s}
      -> {"rendered": s, "ids": [...], "prompt": s}
      apply_chat_template(tokenize=False), its ids (tokenize=True), and the rendering with
      add_generation_prompt=True; chat_template, when given, replaces the folder's template.
      A template error gives {"error": "..."}.
"""
import json
import sys

from tokenizers import Tokenizer


def main():
    folder, src, dst = sys.argv[1:4]
    rows = [json.loads(line) for line in open(src, encoding="utf-8")]
    fast = Tokenizer.from_file(folder + "/tokenizer.json")
    auto = None
    if any("messages" in r for r in rows):  # transformers only where needed: it is slow to import
        from transformers import AutoTokenizer

        auto = AutoTokenizer.from_pretrained(folder)
    with open(dst, "w", encoding="utf-8") as out:
        for row in rows:
            if "text" in row:
                ids = fast.encode(row["text"], add_special_tokens=False).ids
                result = {"ids": ids, "decoded": fast.decode(ids, skip_special_tokens=False)}
            else:
                result = render(auto, row)
            out.write(json.dumps(result, ensure_ascii=False) + "\n")


def render(auto, row):
    kw = {"chat_template": row.get("chat_template")}
    try:
        rendered = auto.apply_chat_template(row["messages"], tokenize=False, **kw)
        ids = auto.apply_chat_template(row["messages"], tokenize=True, return_dict=True, **kw)["input_ids"]
        prompt = auto.apply_chat_template(row["messages"], tokenize=False, add_generation_prompt=True, **kw)
    except Exception as e:  # a template that raises: anvil must reject the row too
        return {"error": f"{type(e).__name__}: {e}"}
    return {"rendered": rendered, "ids": list(ids), "prompt": prompt}


if __name__ == "__main__":
    main()
