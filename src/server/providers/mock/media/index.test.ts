import { describe, expect, it } from "vitest";
import * as media from "./index.js";

describe("media index", () => {
  it("exposes every generator and reader the server uses", () => {
    const functions = {
      encodePng: media.encodePng,
      mockImage: media.mockImage,
      parseSize: media.parseSize,
      readPngSize: media.readPngSize,
      encodeWav: media.encodeWav,
      readWavInfo: media.readWavInfo,
      mockSpeech: media.mockSpeech,
      transcribeMockWav: media.transcribeMockWav,
      transcribeMockPcm: media.transcribeMockPcm,
      mockMusic: media.mockMusic,
      speechContentType: media.speechContentType,
      mockVideo: media.mockVideo,
      readAviInfo: media.readAviInfo,
      extendMockVideo: media.extendMockVideo,
    };
    for (const [name, fn] of Object.entries(functions)) expect(typeof fn, name).toBe("function");
    expect(media.supportedMockSpeechFormats).toEqual(["wav", "pcm"]);
  });

  it("produces one parseable file of each kind", () => {
    expect(media.readPngSize(media.mockImage("index", "256x256"))).toEqual({
      width: 256,
      height: 256,
    });
    expect(media.transcribeMockWav(media.mockSpeech("index"))).toBe("index");
    expect(media.readWavInfo(media.mockMusic("index", 1))?.durationSeconds).toBe(1);
    expect(media.readAviInfo(media.mockVideo("index", { seconds: 1 }))?.frames).toBe(6);
  });
});
