"""Writes the small bad Parquet files of tests/test_data_parquet.cpp (run here with pyarrow)."""
import pyarrow as pa
import pyarrow.parquet as pq

t = pa.table({"text": ["one", "two", "three"]})
pq.write_table(t, "good.parquet", compression="snappy", use_dictionary=False)
good = open("good.parquet", "rb").read()
open("bad-magic.parquet", "wb").write(b"PAR0" + good[4:])
open("truncated.parquet", "wb").write(good[:-40])
open("footer-length.parquet", "wb").write(good[:4] + good[-8:])  # footer length past the start
footer_len = int.from_bytes(good[-8:-4], "little")
f0 = len(good) - 8 - footer_len
open("corrupt-footer.parquet", "wb").write(good[:f0] + b"\xff" * footer_len + good[-8:])
pq.write_table(t, "brotli.parquet", compression="brotli")
pq.write_table(pa.table({"text": pa.array([1, 2, 3], pa.int64())}), "int-text.parquet")
pq.write_table(pa.table({"body": ["a", "b"]}), "no-columns.parquet")
# Inside the snappy data page, the first value's 4-byte PLAIN length garbled.
at = good.index(b"\x03\x00\x00\x00one")
open("corrupt-page.parquet", "wb").write(good[:at] + b"\xfe\xfe\xfe\xfe" + good[at + 4:])
