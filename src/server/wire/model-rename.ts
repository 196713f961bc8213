import { closingQuote } from "./json-depth.js";

/**
 * The JSON text `raw` with its model `from` renamed `to`, or undefined when the rename is not
 * certain: `raw` must hold exactly one `"model"` key with a string value, and that value must be
 * `from` as JSON.stringify writes it (a quote inside a JSON string is escaped, so a match is a key
 * and its value). Whitespace around them is kept. Used both ways: a client's body forwarded to its
 * provider, and a provider's answer passed back.
 */
export function renamedModelText(raw: string, from: unknown, to: string): string | undefined {
  if (typeof from !== "string") return undefined;
  const value = JSON.stringify(from);
  let found = -1;
  for (let at = raw.indexOf('"model"'); at !== -1; at = raw.indexOf('"model"', at + 7)) {
    let i = skipSpace(raw, at + 7);
    if (raw[i] !== ":") continue;
    i = skipSpace(raw, i + 1);
    if (raw[i] !== '"') continue;
    if (found !== -1 || !raw.startsWith(value, i)) return undefined;
    found = i;
  }
  if (found === -1) return undefined;
  if (from === to) return raw;
  return `${raw.slice(0, found)}${JSON.stringify(to)}${raw.slice(found + value.length)}`;
}

function skipSpace(text: string, at: number): number {
  let i = at;
  while (text[i] === " " || text[i] === "\n" || text[i] === "\r" || text[i] === "\t") i++;
  return i;
}

/**
 * The keys of the JSON object `text` at its top level, as written: a key written twice counts
 * twice. Fewer keys parsed than written means a repeated key, which a provider's parser may read
 * otherwise than JSON.parse did (the first instead of the last `max_tokens`), so such a body is
 * not forwarded as written.
 */
export function topLevelKeyCount(text: string): number {
  let depth = 0;
  let keys = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const end = closingQuote(text, i);
      if (end === -1) return keys;
      if (depth === 1 && text[skipSpace(text, end + 1)] === ":") keys++;
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      depth++;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return keys;
}
