// Python's str.lower/upper/title/capitalize (see case_map.h). The tables are Unicode 14.0's,
// as Python 3.11 applies them: the code points whose full case mappings (SpecialCasing.txt,
// unconditional) are longer than one code point, the cased code points that are not in
// categories Lu/Ll/Lt (Other_Lowercase, Other_Uppercase), and the case-ignorable ones that are
// not in categories Mn/Me/Cf/Lm/Sk (Word_Break MidLetter, MidNumLet and Single_Quote).
#include "data/case_map.h"

#include <utf8proc.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "data/utf8.h"

namespace anvil {
namespace {

struct FullMapping {
  char32_t cp;
  const char* lower;  // UTF-8
  const char* upper;
  const char* title;
};

constexpr FullMapping kFull[] = {
    {0x00DF, "\xc3\x9f", "\x53\x53", "\x53\x73"},
    {0x0130, "\x69\xcc\x87", "\xc4\xb0", "\xc4\xb0"},
    {0x0149, "\xc5\x89", "\xca\xbc\x4e", "\xca\xbc\x4e"},
    {0x01F0, "\xc7\xb0", "\x4a\xcc\x8c", "\x4a\xcc\x8c"},
    {0x0390, "\xce\x90", "\xce\x99\xcc\x88\xcc\x81", "\xce\x99\xcc\x88\xcc\x81"},
    {0x03B0, "\xce\xb0", "\xce\xa5\xcc\x88\xcc\x81", "\xce\xa5\xcc\x88\xcc\x81"},
    {0x0587, "\xd6\x87", "\xd4\xb5\xd5\x92", "\xd4\xb5\xd6\x82"},
    {0x1E96, "\xe1\xba\x96", "\x48\xcc\xb1", "\x48\xcc\xb1"},
    {0x1E97, "\xe1\xba\x97", "\x54\xcc\x88", "\x54\xcc\x88"},
    {0x1E98, "\xe1\xba\x98", "\x57\xcc\x8a", "\x57\xcc\x8a"},
    {0x1E99, "\xe1\xba\x99", "\x59\xcc\x8a", "\x59\xcc\x8a"},
    {0x1E9A, "\xe1\xba\x9a", "\x41\xca\xbe", "\x41\xca\xbe"},
    {0x1F50, "\xe1\xbd\x90", "\xce\xa5\xcc\x93", "\xce\xa5\xcc\x93"},
    {0x1F52, "\xe1\xbd\x92", "\xce\xa5\xcc\x93\xcc\x80", "\xce\xa5\xcc\x93\xcc\x80"},
    {0x1F54, "\xe1\xbd\x94", "\xce\xa5\xcc\x93\xcc\x81", "\xce\xa5\xcc\x93\xcc\x81"},
    {0x1F56, "\xe1\xbd\x96", "\xce\xa5\xcc\x93\xcd\x82", "\xce\xa5\xcc\x93\xcd\x82"},
    {0x1F80, "\xe1\xbe\x80", "\xe1\xbc\x88\xce\x99", "\xe1\xbe\x88"},
    {0x1F81, "\xe1\xbe\x81", "\xe1\xbc\x89\xce\x99", "\xe1\xbe\x89"},
    {0x1F82, "\xe1\xbe\x82", "\xe1\xbc\x8a\xce\x99", "\xe1\xbe\x8a"},
    {0x1F83, "\xe1\xbe\x83", "\xe1\xbc\x8b\xce\x99", "\xe1\xbe\x8b"},
    {0x1F84, "\xe1\xbe\x84", "\xe1\xbc\x8c\xce\x99", "\xe1\xbe\x8c"},
    {0x1F85, "\xe1\xbe\x85", "\xe1\xbc\x8d\xce\x99", "\xe1\xbe\x8d"},
    {0x1F86, "\xe1\xbe\x86", "\xe1\xbc\x8e\xce\x99", "\xe1\xbe\x8e"},
    {0x1F87, "\xe1\xbe\x87", "\xe1\xbc\x8f\xce\x99", "\xe1\xbe\x8f"},
    {0x1F88, "\xe1\xbe\x80", "\xe1\xbc\x88\xce\x99", "\xe1\xbe\x88"},
    {0x1F89, "\xe1\xbe\x81", "\xe1\xbc\x89\xce\x99", "\xe1\xbe\x89"},
    {0x1F8A, "\xe1\xbe\x82", "\xe1\xbc\x8a\xce\x99", "\xe1\xbe\x8a"},
    {0x1F8B, "\xe1\xbe\x83", "\xe1\xbc\x8b\xce\x99", "\xe1\xbe\x8b"},
    {0x1F8C, "\xe1\xbe\x84", "\xe1\xbc\x8c\xce\x99", "\xe1\xbe\x8c"},
    {0x1F8D, "\xe1\xbe\x85", "\xe1\xbc\x8d\xce\x99", "\xe1\xbe\x8d"},
    {0x1F8E, "\xe1\xbe\x86", "\xe1\xbc\x8e\xce\x99", "\xe1\xbe\x8e"},
    {0x1F8F, "\xe1\xbe\x87", "\xe1\xbc\x8f\xce\x99", "\xe1\xbe\x8f"},
    {0x1F90, "\xe1\xbe\x90", "\xe1\xbc\xa8\xce\x99", "\xe1\xbe\x98"},
    {0x1F91, "\xe1\xbe\x91", "\xe1\xbc\xa9\xce\x99", "\xe1\xbe\x99"},
    {0x1F92, "\xe1\xbe\x92", "\xe1\xbc\xaa\xce\x99", "\xe1\xbe\x9a"},
    {0x1F93, "\xe1\xbe\x93", "\xe1\xbc\xab\xce\x99", "\xe1\xbe\x9b"},
    {0x1F94, "\xe1\xbe\x94", "\xe1\xbc\xac\xce\x99", "\xe1\xbe\x9c"},
    {0x1F95, "\xe1\xbe\x95", "\xe1\xbc\xad\xce\x99", "\xe1\xbe\x9d"},
    {0x1F96, "\xe1\xbe\x96", "\xe1\xbc\xae\xce\x99", "\xe1\xbe\x9e"},
    {0x1F97, "\xe1\xbe\x97", "\xe1\xbc\xaf\xce\x99", "\xe1\xbe\x9f"},
    {0x1F98, "\xe1\xbe\x90", "\xe1\xbc\xa8\xce\x99", "\xe1\xbe\x98"},
    {0x1F99, "\xe1\xbe\x91", "\xe1\xbc\xa9\xce\x99", "\xe1\xbe\x99"},
    {0x1F9A, "\xe1\xbe\x92", "\xe1\xbc\xaa\xce\x99", "\xe1\xbe\x9a"},
    {0x1F9B, "\xe1\xbe\x93", "\xe1\xbc\xab\xce\x99", "\xe1\xbe\x9b"},
    {0x1F9C, "\xe1\xbe\x94", "\xe1\xbc\xac\xce\x99", "\xe1\xbe\x9c"},
    {0x1F9D, "\xe1\xbe\x95", "\xe1\xbc\xad\xce\x99", "\xe1\xbe\x9d"},
    {0x1F9E, "\xe1\xbe\x96", "\xe1\xbc\xae\xce\x99", "\xe1\xbe\x9e"},
    {0x1F9F, "\xe1\xbe\x97", "\xe1\xbc\xaf\xce\x99", "\xe1\xbe\x9f"},
    {0x1FA0, "\xe1\xbe\xa0", "\xe1\xbd\xa8\xce\x99", "\xe1\xbe\xa8"},
    {0x1FA1, "\xe1\xbe\xa1", "\xe1\xbd\xa9\xce\x99", "\xe1\xbe\xa9"},
    {0x1FA2, "\xe1\xbe\xa2", "\xe1\xbd\xaa\xce\x99", "\xe1\xbe\xaa"},
    {0x1FA3, "\xe1\xbe\xa3", "\xe1\xbd\xab\xce\x99", "\xe1\xbe\xab"},
    {0x1FA4, "\xe1\xbe\xa4", "\xe1\xbd\xac\xce\x99", "\xe1\xbe\xac"},
    {0x1FA5, "\xe1\xbe\xa5", "\xe1\xbd\xad\xce\x99", "\xe1\xbe\xad"},
    {0x1FA6, "\xe1\xbe\xa6", "\xe1\xbd\xae\xce\x99", "\xe1\xbe\xae"},
    {0x1FA7, "\xe1\xbe\xa7", "\xe1\xbd\xaf\xce\x99", "\xe1\xbe\xaf"},
    {0x1FA8, "\xe1\xbe\xa0", "\xe1\xbd\xa8\xce\x99", "\xe1\xbe\xa8"},
    {0x1FA9, "\xe1\xbe\xa1", "\xe1\xbd\xa9\xce\x99", "\xe1\xbe\xa9"},
    {0x1FAA, "\xe1\xbe\xa2", "\xe1\xbd\xaa\xce\x99", "\xe1\xbe\xaa"},
    {0x1FAB, "\xe1\xbe\xa3", "\xe1\xbd\xab\xce\x99", "\xe1\xbe\xab"},
    {0x1FAC, "\xe1\xbe\xa4", "\xe1\xbd\xac\xce\x99", "\xe1\xbe\xac"},
    {0x1FAD, "\xe1\xbe\xa5", "\xe1\xbd\xad\xce\x99", "\xe1\xbe\xad"},
    {0x1FAE, "\xe1\xbe\xa6", "\xe1\xbd\xae\xce\x99", "\xe1\xbe\xae"},
    {0x1FAF, "\xe1\xbe\xa7", "\xe1\xbd\xaf\xce\x99", "\xe1\xbe\xaf"},
    {0x1FB2, "\xe1\xbe\xb2", "\xe1\xbe\xba\xce\x99", "\xe1\xbe\xba\xcd\x85"},
    {0x1FB3, "\xe1\xbe\xb3", "\xce\x91\xce\x99", "\xe1\xbe\xbc"},
    {0x1FB4, "\xe1\xbe\xb4", "\xce\x86\xce\x99", "\xce\x86\xcd\x85"},
    {0x1FB6, "\xe1\xbe\xb6", "\xce\x91\xcd\x82", "\xce\x91\xcd\x82"},
    {0x1FB7, "\xe1\xbe\xb7", "\xce\x91\xcd\x82\xce\x99", "\xce\x91\xcd\x82\xcd\x85"},
    {0x1FBC, "\xe1\xbe\xb3", "\xce\x91\xce\x99", "\xe1\xbe\xbc"},
    {0x1FC2, "\xe1\xbf\x82", "\xe1\xbf\x8a\xce\x99", "\xe1\xbf\x8a\xcd\x85"},
    {0x1FC3, "\xe1\xbf\x83", "\xce\x97\xce\x99", "\xe1\xbf\x8c"},
    {0x1FC4, "\xe1\xbf\x84", "\xce\x89\xce\x99", "\xce\x89\xcd\x85"},
    {0x1FC6, "\xe1\xbf\x86", "\xce\x97\xcd\x82", "\xce\x97\xcd\x82"},
    {0x1FC7, "\xe1\xbf\x87", "\xce\x97\xcd\x82\xce\x99", "\xce\x97\xcd\x82\xcd\x85"},
    {0x1FCC, "\xe1\xbf\x83", "\xce\x97\xce\x99", "\xe1\xbf\x8c"},
    {0x1FD2, "\xe1\xbf\x92", "\xce\x99\xcc\x88\xcc\x80", "\xce\x99\xcc\x88\xcc\x80"},
    {0x1FD3, "\xe1\xbf\x93", "\xce\x99\xcc\x88\xcc\x81", "\xce\x99\xcc\x88\xcc\x81"},
    {0x1FD6, "\xe1\xbf\x96", "\xce\x99\xcd\x82", "\xce\x99\xcd\x82"},
    {0x1FD7, "\xe1\xbf\x97", "\xce\x99\xcc\x88\xcd\x82", "\xce\x99\xcc\x88\xcd\x82"},
    {0x1FE2, "\xe1\xbf\xa2", "\xce\xa5\xcc\x88\xcc\x80", "\xce\xa5\xcc\x88\xcc\x80"},
    {0x1FE3, "\xe1\xbf\xa3", "\xce\xa5\xcc\x88\xcc\x81", "\xce\xa5\xcc\x88\xcc\x81"},
    {0x1FE4, "\xe1\xbf\xa4", "\xce\xa1\xcc\x93", "\xce\xa1\xcc\x93"},
    {0x1FE6, "\xe1\xbf\xa6", "\xce\xa5\xcd\x82", "\xce\xa5\xcd\x82"},
    {0x1FE7, "\xe1\xbf\xa7", "\xce\xa5\xcc\x88\xcd\x82", "\xce\xa5\xcc\x88\xcd\x82"},
    {0x1FF2, "\xe1\xbf\xb2", "\xe1\xbf\xba\xce\x99", "\xe1\xbf\xba\xcd\x85"},
    {0x1FF3, "\xe1\xbf\xb3", "\xce\xa9\xce\x99", "\xe1\xbf\xbc"},
    {0x1FF4, "\xe1\xbf\xb4", "\xce\x8f\xce\x99", "\xce\x8f\xcd\x85"},
    {0x1FF6, "\xe1\xbf\xb6", "\xce\xa9\xcd\x82", "\xce\xa9\xcd\x82"},
    {0x1FF7, "\xe1\xbf\xb7", "\xce\xa9\xcd\x82\xce\x99", "\xce\xa9\xcd\x82\xcd\x85"},
    {0x1FFC, "\xe1\xbf\xb3", "\xce\xa9\xce\x99", "\xe1\xbf\xbc"},
    {0xFB00, "\xef\xac\x80", "\x46\x46", "\x46\x66"},
    {0xFB01, "\xef\xac\x81", "\x46\x49", "\x46\x69"},
    {0xFB02, "\xef\xac\x82", "\x46\x4c", "\x46\x6c"},
    {0xFB03, "\xef\xac\x83", "\x46\x46\x49", "\x46\x66\x69"},
    {0xFB04, "\xef\xac\x84", "\x46\x46\x4c", "\x46\x66\x6c"},
    {0xFB05, "\xef\xac\x85", "\x53\x54", "\x53\x74"},
    {0xFB06, "\xef\xac\x86", "\x53\x54", "\x53\x74"},
    {0xFB13, "\xef\xac\x93", "\xd5\x84\xd5\x86", "\xd5\x84\xd5\xb6"},
    {0xFB14, "\xef\xac\x94", "\xd5\x84\xd4\xb5", "\xd5\x84\xd5\xa5"},
    {0xFB15, "\xef\xac\x95", "\xd5\x84\xd4\xbb", "\xd5\x84\xd5\xab"},
    {0xFB16, "\xef\xac\x96", "\xd5\x8e\xd5\x86", "\xd5\x8e\xd5\xb6"},
    {0xFB17, "\xef\xac\x97", "\xd5\x84\xd4\xbd", "\xd5\x84\xd5\xad"},
};

constexpr char32_t kCasedExtra[][2] = {
    {0xAA, 0xAA}, {0xBA, 0xBA}, {0x2B0, 0x2B8}, {0x2C0, 0x2C1}, {0x2E0, 0x2E4}, {0x345, 0x345},
    {0x37A, 0x37A}, {0x1D2C, 0x1D6A}, {0x1D78, 0x1D78}, {0x1D9B, 0x1DBF}, {0x2071, 0x2071}, {0x207F, 0x207F},
    {0x2090, 0x209C}, {0x2160, 0x217F}, {0x24B6, 0x24E9}, {0x2C7C, 0x2C7D}, {0xA69C, 0xA69D},
    {0xA770, 0xA770}, {0xA7F8, 0xA7F9}, {0xAB5C, 0xAB5F}, {0x10780, 0x10780}, {0x10783, 0x10785},
    {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x1F130, 0x1F149}, {0x1F150, 0x1F169}, {0x1F170, 0x1F189},
};

constexpr char32_t kIgnorableExtra[] = {
    0x27, 0x2E, 0x3A, 0xB7, 0x387, 0x55F, 0x5F4, 0x2018, 0x2019, 0x2024, 0x2027, 0xFE13, 0xFE52, 0xFE55, 0xFF07, 0xFF0E, 0xFF1A,
};

const FullMapping* full_mapping(char32_t c) {
  const auto* it = std::lower_bound(std::begin(kFull), std::end(kFull), c,
                                    [](const FullMapping& m, char32_t v) { return m.cp < v; });
  return it != std::end(kFull) && it->cp == c ? it : nullptr;
}

bool cased(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  if (cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT) return true;
  for (const auto& r : kCasedExtra)
    if (c >= r[0] && c <= r[1]) return true;
  return false;
}

bool case_ignorable(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_ME || cat == UTF8PROC_CATEGORY_CF ||
      cat == UTF8PROC_CATEGORY_LM || cat == UTF8PROC_CATEGORY_SK)
    return true;
  return std::find(std::begin(kIgnorableExtra), std::end(kIgnorableExtra), c) != std::end(kIgnorableExtra);
}

// Capital sigma at cps[i] lowers to final sigma when a cased letter precedes it and none
// follows it, case-ignorable code points skipped on both sides (Python's handle_capital_sigma).
bool final_sigma(const std::vector<char32_t>& cps, size_t i) {
  size_t j = i;
  while (j > 0 && case_ignorable(cps[j - 1])) --j;
  if (j == 0 || !cased(cps[j - 1])) return false;
  size_t k = i + 1;
  while (k < cps.size() && case_ignorable(cps[k])) ++k;
  return k == cps.size() || !cased(cps[k]);
}

void append_lower(std::string& out, const std::vector<char32_t>& cps, size_t i) {
  const char32_t c = cps[i];
  if (c == 0x3A3) return utf8_append(out, final_sigma(cps, i) ? 0x3C2 : 0x3C3);
  if (const FullMapping* m = full_mapping(c)) return void(out += m->lower);
  utf8_append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

void append_upper(std::string& out, char32_t c) {
  if (const FullMapping* m = full_mapping(c)) return void(out += m->upper);
  utf8_append(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}

void append_title(std::string& out, char32_t c) {
  if (const FullMapping* m = full_mapping(c)) return void(out += m->title);
  utf8_append(out, static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
}

}  // namespace

std::string python_case(std::string_view s, CaseMode mode) {
  std::vector<char32_t> cps;
  for (size_t i = 0; i < s.size();) cps.push_back(utf8_next(s, i));
  std::string out;
  bool prev_cased = false;
  for (size_t i = 0; i < cps.size(); ++i) {
    switch (mode) {
      case CaseMode::kLower: append_lower(out, cps, i); break;
      case CaseMode::kUpper: append_upper(out, cps[i]); break;
      case CaseMode::kTitle:
        if (prev_cased) append_lower(out, cps, i);
        else append_title(out, cps[i]);
        prev_cased = cased(cps[i]);
        break;
      case CaseMode::kCapitalize:
        if (i == 0) append_title(out, cps[i]);
        else append_lower(out, cps, i);
        break;
    }
  }
  return out;
}

}  // namespace anvil
