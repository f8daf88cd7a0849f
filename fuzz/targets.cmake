# The fuzz targets, fuzz/fuzz_<name>.cpp, each with its seed corpus fuzz/corpus/<name>/ (and,
# where one helps, the dictionary fuzz/dict/<name>.dict). Shared by fuzz/CMakeLists.txt and
# the corpus replays of tests/CMakeLists.txt.
set(ANVIL_FUZZ_TARGETS safetensors parquet jsonl_rows tokenizer chat_template toml_config model_config
                       checkpoint_meta)
