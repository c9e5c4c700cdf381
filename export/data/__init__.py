"""export.data"""
