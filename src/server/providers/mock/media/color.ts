export type Rgb = readonly [number, number, number];

/**
 * Palettes are chosen in HSL so that colours derived from a hash stay pleasant (bounded
 * saturation and lightness) instead of drifting into muddy greys that raw RGB bytes give.
 */
export function hslToRgb(hueDegrees: number, saturation: number, lightness: number): Rgb {
  const hue = (((hueDegrees % 360) + 360) % 360) / 360;
  if (saturation === 0) {
    const grey = Math.round(lightness * 255);
    return [grey, grey, grey];
  }
  const q =
    lightness < 0.5
      ? lightness * (1 + saturation)
      : lightness + saturation - lightness * saturation;
  const p = 2 * lightness - q;
  const channel = (offset: number): number => {
    let t = hue + offset;
    if (t < 0) t += 1;
    if (t > 1) t -= 1;
    let value: number;
    if (t < 1 / 6) value = p + (q - p) * 6 * t;
    else if (t < 1 / 2) value = q;
    else if (t < 2 / 3) value = p + (q - p) * (2 / 3 - t) * 6;
    else value = p;
    return Math.round(value * 255);
  };
  return [channel(1 / 3), channel(0), channel(-1 / 3)];
}

export function mixRgb(from: Rgb, to: Rgb, amount: number): Rgb {
  return [
    Math.round(from[0] + (to[0] - from[0]) * amount),
    Math.round(from[1] + (to[1] - from[1]) * amount),
    Math.round(from[2] + (to[2] - from[2]) * amount),
  ];
}
