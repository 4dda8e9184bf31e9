/** A deterministic embedder for the tests: one axis per topic (drinks, code, music), a text's
 * vector counts its words of each topic (plus 0.01, so no vector is zero); it records every text
 * it embeds. "a hot beverage" is near "jasmine tea" though they share no word. */
const TOPICS = [
  ["tea", "coffee", "drink", "beverage", "jasmine"],
  ["code", "compiler", "program", "rust", "python"],
  ["jazz", "music", "song", "records"],
];

export class FakeEmbeddings {
  readonly documents: string[] = [];
  readonly queries: string[] = [];

  static vector(text: string): number[] {
    const words = text.toLowerCase().match(/[a-z]+/g) ?? [];
    return TOPICS.map((topic) => words.filter((w) => topic.includes(w)).length + 0.01);
  }

  async embedDocuments(texts: string[]): Promise<number[][]> {
    this.documents.push(...texts);
    return texts.map(FakeEmbeddings.vector);
  }

  async embedQuery(text: string): Promise<number[]> {
    this.queries.push(text);
    return FakeEmbeddings.vector(text);
  }
}
