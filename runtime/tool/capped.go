package tool

// CapOutput applies the output limits of the built-in tools to text a tool
// produced all at once (an MCP server's answer): the model sees at most the
// same head and tail as for shell, and the whole text is kept under
// outputDir (when set) in a file named after the tool and call id.
func CapOutput(text, toolName, callID, outputDir string) (capped, fullPath string) {
	c := newCapture(defaultOutputLimits, outputDir, outputFileName(toolName, callID), nil)
	c.Write("stdout", []byte(text))
	return c.finish()
}
