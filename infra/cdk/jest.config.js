// Type checking runs separately (`tsc --noEmit`); with `isolatedModules` in tsconfig.json ts-jest only
// transpiles, which is ~3x faster than type-checking inside jest.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  transform: {
    '^.+\\.tsx?$': ['ts-jest', {}],
  },
};
