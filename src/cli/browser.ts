/**
 * Opens a URL in the user's browser. With no display, `open` resolves without opening anything,
 * so every caller also prints the URL.
 */
export async function openInBrowser(url: string): Promise<void> {
  const { default: open } = await import("open");
  await open(url);
}
