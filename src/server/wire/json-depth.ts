/**
 * Deepest nesting of objects and arrays a JSON body may have. The translators and validators walk
 * bodies recursively, so a body nested thousands deep would overflow the stack; real requests
 * (tool schemas included) stay far below this.
 */
export const maxJsonDepth = 128;

/**
 * True when `text` nests objects or arrays deeper than `max`. It does not validate (JSON.parse
 * does that). Most bodies have fewer openers in all than the bound, which a few native indexOf
 * hops tell; only the others are walked character by character.
 */
export function nestedDeeperThan(text: string, max: number): boolean {
  return !fewerOpenersThan(text, max + 1) && walkDeeperThan(text, max);
}

function fewerOpenersThan(text: string, bound: number): boolean {
  let count = 0;
  for (let i = text.indexOf("{"); i !== -1; i = text.indexOf("{", i + 1))
    if (++count >= bound) return false;
  for (let i = text.indexOf("["); i !== -1; i = text.indexOf("[", i + 1))
    if (++count >= bound) return false;
  return true;
}

/**
 * The index of the quote that closes the JSON string opened at `open` (one preceded by an even
 * number of backslashes), found with indexOf; -1 when the string is not closed.
 */
export function closingQuote(text: string, open: number): number {
  let end = open;
  for (;;) {
    end = text.indexOf('"', end + 1);
    if (end === -1) return -1;
    let slash = end - 1;
    while (text.charCodeAt(slash) === 0x5c) slash--;
    if ((end - 1 - slash) % 2 === 0) return end;
  }
}

/** One pass over the characters, skipping string contents with indexOf. */
function walkDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const end = closingQuote(text, i);
      if (end === -1) return false;
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return false;
}
