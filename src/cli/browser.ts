/**
 * Opens a URL in the user's browser. `open` resolves without opening anything where there is no
 * display, so that case is refused here (and every caller prints the URL anyway).
 */
export async function openInBrowser(url: string): Promise<void> {
  const env = process.env;
  if (process.platform === "linux" && !env.DISPLAY && !env.WAYLAND_DISPLAY && !env.BROWSER)
    throw new Error("no display");
  const { default: open } = await import("open");
  await open(url);
}
