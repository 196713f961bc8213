import { skipSpace } from "./json-depth.js";

/**
 * The JSON text `raw` with its model `from` renamed `to`, or undefined when the rename is not
 * certain: `raw` must hold exactly one `"model"` key with a string value, and that value must be
 * `from` as JSON.stringify writes it (a quote inside a JSON string is escaped, so a match is a key
 * and its value). Whitespace around them is kept. For a provider's answer passed back; a client's
 * body forwarded is spliced where its walk found the model (`forwardedBody`).
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
