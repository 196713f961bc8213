/**
 * Deepest nesting of objects and arrays a JSON body may have. The translators and validators walk
 * bodies recursively, so a body nested thousands deep would overflow the stack; real requests
 * (tool schemas included) stay far below this.
 */
export const maxJsonDepth = 128;

/**
 * True when `text` nests objects or arrays deeper than `max`. It does not validate (JSON.parse
 * does that). Most short texts (a tool call's arguments) have fewer openers in all than the
 * bound, which a few native indexOf hops tell; only the others are walked.
 */
export function nestedDeeperThan(text: string, max: number): boolean {
  return !fewerOpenersThan(text, max + 1) && jsonShape(text, max).tooDeep;
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

/** What one walk over a JSON object's text tells, before JSON.parse reads it. */
export interface JsonShape {
  /** It nests objects or arrays deeper than the bound the walk was given (the walk stopped). */
  tooDeep: boolean;
  /**
   * Keys of the top-level object as written: a key written twice counts twice, so fewer keys
   * parsed than written means a repeated key, which a provider's parser may read otherwise than
   * JSON.parse did (the first `max_tokens` instead of the last).
   */
  topLevelKeys: number;
  /** Where the top-level `model` key's string value is, its quotes included: [start, end). */
  model: [number, number] | undefined;
  /**
   * A key `url`, `image_url`, `file_url` or `file_id` is written somewhere (walked up to where the
   * walk stopped): the body may name input its provider fetches itself (`readsInputByReference`).
   */
  referenceKey: boolean;
}

/** `"url"`, `"file_id"`, `"file_url"`, `"image_url"`, each by its length less one, quotes included. */
const referenceKeys = new Map([
  [4, '"url"'],
  [8, '"file_id"'],
  [9, '"file_url"'],
  [10, '"image_url"'],
]);

/**
 * One pass over the characters, skipping string contents with indexOf: a long conversation's
 * body is walked once for its depth, its top-level keys and its model, not once for each.
 */
export function jsonShape(text: string, max: number): JsonShape {
  let depth = 0;
  let topLevelKeys = 0;
  let model: [number, number] | undefined;
  let referenceKey = false;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      const end = closingQuote(text, i);
      if (end === -1) break;
      if (!referenceKey) {
        const key = referenceKeys.get(end - i);
        referenceKey =
          key !== undefined &&
          text.startsWith(key, i) &&
          text.charCodeAt(skipSpace(text, end + 1)) === 0x3a;
      }
      if (depth === 1) {
        const colon = skipSpace(text, end + 1);
        if (text.charCodeAt(colon) === 0x3a) {
          topLevelKeys++;
          if (end - i === 6 && text.startsWith('"model"', i)) {
            const value = skipSpace(text, colon + 1);
            const close = text.charCodeAt(value) === 0x22 ? closingQuote(text, value) : -1;
            if (close !== -1) {
              model = [value, close + 1];
              i = close;
              continue;
            }
          }
          i = colon;
          continue;
        }
      }
      i = end;
    } else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return { tooDeep: true, topLevelKeys, model, referenceKey };
    } else if (c === 0x7d || c === 0x5d) {
      depth--;
    }
  }
  return { tooDeep: false, topLevelKeys, model, referenceKey };
}

/** The index of the first character at or after `at` that is not JSON's whitespace. */
export function skipSpace(text: string, at: number): number {
  let i = at;
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}
