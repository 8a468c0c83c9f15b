// A POSIX ustar archive of in-memory files, for a template build's context (the API takes the
// context as a tar body). Names up to 100 bytes, regular files only.

function field(header, offset, length, text) {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length > length) throw new Error(`tar: '${text}' does not fit in ${length} bytes`);
  header.set(bytes, offset);
}
function octal(n, length) { return `${n.toString(8).padStart(length - 1, '0')}\0`; }

// `files`: [{ name, data: Uint8Array }] → Uint8Array.
export function tar(files) {
  const parts = [];
  for (const f of files) {
    if (!f.name || f.name.startsWith('/') || f.name.split('/').includes('..')) {
      throw new Error(`tar: '${f.name}' is not a relative path inside the context`);
    }
    const header = new Uint8Array(512);
    field(header, 0, 100, f.name);
    field(header, 100, 8, octal(0o644, 8));
    field(header, 108, 8, octal(0, 8));
    field(header, 116, 8, octal(0, 8));
    field(header, 124, 12, octal(f.data.length, 12));
    field(header, 136, 12, octal(Math.floor(Date.now() / 1000), 12));
    field(header, 148, 8, '        ');  // the checksum counts itself as spaces
    header[156] = 0x30;  // '0': a regular file
    field(header, 257, 6, 'ustar\0');
    field(header, 263, 2, '00');
    let sum = 0;
    for (const b of header) sum += b;
    field(header, 148, 8, `${sum.toString(8).padStart(6, '0')}\0 `);
    parts.push(header, f.data, new Uint8Array((512 - (f.data.length % 512)) % 512));
  }
  parts.push(new Uint8Array(1024));
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}
