// Fuzz target: a Parquet file, as a dataset's file is read: the footer, every leaf column of
// every row group decoded (pages, levels, encodings, codecs), then the rows assembled as the
// training data reader hands them out (data/source.h) and put into their shapes.
#include "data/parquet.h"
#include "data/row_shapes.h"
#include "data/source.h"
#include "fuzz_input.h"

namespace {

void decode_columns(const std::string& path) {
  const anvil::parquet::File file(path);
  for (int g = 0; g < file.num_row_groups(); ++g)
    for (size_t n = 0; n < file.schema().size(); ++n)
      if (file.schema()[n].column >= 0)
        anvil::fuzz::expect_clean([&] { file.read_column(g, static_cast<int>(n)); });
}

void read_rows(const std::string& path) {
  const std::unique_ptr<anvil::RowReader> reader = anvil::RowReader::open(path);
  const anvil::ColumnMap columns;
  while (const std::unique_ptr<anvil::RowBatch> batch = reader->next(64, 1 << 20))
    for (size_t i = 0; i < batch->size(); ++i)
      anvil::fuzz::expect_clean([&] {
        batch->where(i);
        anvil::shape_row(batch->row(i), columns);
      });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_input("data.parquet", data, size);
  anvil::fuzz::expect_clean([&] { decode_columns(path); });
  anvil::fuzz::expect_clean([&] { read_rows(path); });
  return 0;
}
