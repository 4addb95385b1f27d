/** Types for index.cjs, which tap's plugin build type-checks against. */
export declare const importLoader: string
export declare const testFileExtensions: string[]
export declare const preload: boolean
