// Test oracle for anvil's data tests: the reference JavaScript implementations published by
// Hugging Face (@huggingface/tokenizers for ids, @huggingface/jinja for chat templates).
// Reads one JSON request on stdin:
//   {"tokenizer": DIR, "texts": [...], "chats": [{"messages": [...], "add_generation_prompt": b}], "vars": {...}}
// and writes {"ids": [[...]], "decoded": [...], "rendered": [...]} on stdout. DIR holds
// tokenizer.json and tokenizer_config.json.
import { readFileSync } from "node:fs";
import path from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const req = JSON.parse(readFileSync(0, "utf8"));
const dir = req.tokenizer;
const tokJson = JSON.parse(readFileSync(path.join(dir, "tokenizer.json"), "utf8"));
const config = JSON.parse(readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tokJson, config);
const out = { ids: [], decoded: [], rendered: [] };
for (const text of req.texts ?? []) {
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  out.ids.push(ids);
  out.decoded.push(tok.decode(ids));
}
if (req.chats?.length) {
  const template = new Template(config.chat_template);
  const special = {};
  for (const k of ["bos_token", "eos_token", "unk_token", "pad_token"]) {
    const v = config[k];
    if (typeof v === "string") special[k] = v;
    else if (v && typeof v.content === "string") special[k] = v.content;
  }
  for (const chat of req.chats) {
    out.rendered.push(template.render({ ...special, tools: null, documents: null, ...(req.vars ?? {}),
      messages: chat.messages, add_generation_prompt: !!chat.add_generation_prompt }));
  }
}
process.stdout.write(JSON.stringify(out));
