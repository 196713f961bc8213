import { describe, expect, it } from "vitest";
import { readAviInfo } from "../../../media/avi.js";
import { readPngSize } from "../../../media/png.js";
import { readWavInfo } from "../../../media/wav.js";
import * as media from "./index.js";

describe("media index", () => {
  it("exposes every generator the mock uses", () => {
    const functions = {
      mockImage: media.mockImage,
      mockImageEdit: media.mockImageEdit,
      mockSpeech: media.mockSpeech,
      transcribeMockWav: media.transcribeMockWav,
      transcribeMockPcm: media.transcribeMockPcm,
      mockMusic: media.mockMusic,
      mockVideo: media.mockVideo,
      extendMockVideo: media.extendMockVideo,
    };
    for (const [name, fn] of Object.entries(functions)) expect(typeof fn, name).toBe("function");
    expect(media.supportedMockSpeechFormats).toEqual(["wav", "pcm"]);
  });

  it("produces one parseable file of each kind", () => {
    expect(readPngSize(media.mockImage("index", "256x256"))).toEqual({
      width: 256,
      height: 256,
    });
    expect(media.transcribeMockWav(media.mockSpeech("index"))).toBe("index");
    expect(readWavInfo(media.mockMusic("index", 1))?.durationSeconds).toBe(1);
    expect(readAviInfo(media.mockVideo("index", { seconds: 1 }))?.frames).toBe(6);
  });
});
