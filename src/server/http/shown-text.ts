/**
 * Text a client chose (a device login's client name, a model name, a key label, a tool's name) as
 * one line of plain text for a page or a terminal: control and format characters (line breaks,
 * the ESC of a terminal sequence, bidi overrides such as U+202E, zero-width marks) become U+FFFD,
 * so the text can neither forge a line, drive a terminal, nor reorder or hide the text around it.
 */
export function shownText(text: string): string {
  return text.replace(/[\p{Cc}\p{Cf}\u2028\u2029]/gu, "\uFFFD");
}
