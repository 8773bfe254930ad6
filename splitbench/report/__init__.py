"""What a person reads: the tables (markdown and CSV), the charts and the offline HTML page.
"""
