"""Counts the pixels of given colours in a PNG (for tests/test_report.cpp's screenshot of
headless Chromium), with only the standard library: zlib and the PNG filters.

usage: png_colors.py FILE.png RRGGBB [RRGGBB...]

Prints one JSON object {"width", "height", "RRGGBB": pixels within 8 of it on each channel}.
Reads 8-bit RGB or RGBA images without interlacing (what Chromium writes).
"""
import json
import struct
import sys
import zlib


def rows(path):
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unsupported PNG {header}"
    bpp = 3 if color == 2 else 4
    raw, stride, prev, out = zlib.decompress(idat), width * bpp, bytearray(width * bpp), []
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 255
            elif kind == 2:
                line[i] = (line[i] + b) & 255
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append(line)
        prev = line
    return width, height, bpp, out


def main():
    width, height, bpp, image = rows(sys.argv[1])
    wanted = {h: tuple(int(h[i:i + 2], 16) for i in (0, 2, 4)) for h in sys.argv[2:]}
    counts = dict.fromkeys(wanted, 0)
    for line in image:
        for x in range(0, width * bpp, bpp):
            px = line[x:x + 3]
            for name, rgb in wanted.items():
                if all(abs(px[k] - rgb[k]) <= 8 for k in range(3)):
                    counts[name] += 1
    print(json.dumps({"width": width, "height": height, **counts}))


if __name__ == "__main__":
    main()
