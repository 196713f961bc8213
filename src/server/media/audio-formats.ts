const speechContentTypes: Readonly<Record<string, string>> = {
  mp3: "audio/mpeg",
  opus: "audio/ogg",
  aac: "audio/aac",
  flac: "audio/flac",
  wav: "audio/wav",
  pcm: "audio/pcm",
};

/** The Content-Type for an OpenAI speech `response_format`; octet-stream for unknown ones. */
export function speechContentType(format: string): string {
  return Object.hasOwn(speechContentTypes, format)
    ? speechContentTypes[format]
    : "application/octet-stream";
}
