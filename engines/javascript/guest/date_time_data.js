// How `Intl.DateTimeFormat` takes its data, changed to fit a 64 MiB guest (imported after
// the formatjs polyfill, before the data):
// - Time zones unpack lazily. formatjs turns every transition of every zone into an array
//   when the data is added (16 MB of linear memory for the common zones alone); here a zone is
//   unpacked, as formatjs's `unpack` does, the first time a format asks for it.
// - Locales keep only the fallback range pattern ("{0} – {1}"). formatjs parses every
//   skeleton's range patterns on a locale's first format (5 MB and most of a second per
//   locale), for `formatRange` alone, which then repeats the shared fields
//   ("Jan 1 – Jan 4" where ICU says "Jan 1 – 4").
const addLocaleData = Intl.DateTimeFormat.__addLocaleData;
Intl.DateTimeFormat.__addLocaleData = function addLocaleDataWithoutRanges(...entries) {
  for (const entry of entries) {
    const fallback = entry.data.intervalFormats?.intervalFormatFallback;
    entry.data.intervalFormats = { intervalFormatFallback: fallback };
  }
  return addLocaleData.apply(this, entries);
};

Intl.DateTimeFormat.__addTZData = function addTimeZoneData(data) {
  const abbreviations = data.abbrvs.split('|');
  const offsets = data.offsets.split('|').map((offset) => parseInt(offset, 36));
  const zones = {};
  for (const packed of data.zones) {
    const name = packed.slice(0, packed.indexOf('|'));
    Object.defineProperty(zones, name, {
      enumerable: true,
      configurable: true,
      get() {
        const transitions = packed
          .split('|')
          .slice(1)
          .map((entry) => {
            const [time, abbreviation, offset, dst] = entry.split(',');
            return [
              time === '' ? -Infinity : parseInt(time, 36),
              abbreviations[+abbreviation],
              offsets[+offset],
              dst === '1',
            ];
          });
        Object.defineProperty(zones, name, { value: transitions, enumerable: true });
        return transitions;
      },
    });
  }
  Intl.DateTimeFormat.tzData = zones;
};
